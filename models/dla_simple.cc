// SimpleDLA as in pytorch-cifar models/dla_simple.py: a simplified Deep Layer
// Aggregation (Yu et al., arXiv:1707.06484) in which every tree node joins
// just its two children with a Root.

#include "models/dla_net.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

// Level 1: two BasicBlocks; level n: two trees of level n-1. Only the left
// child strides.
class Tree : public nn::Module {
 public:
  Tree(int64_t in_channels, int64_t out_channels, int level, int64_t stride)
      : root_(register_module("root", Root(2 * out_channels, out_channels))) {
    if (level == 1) {
      left_ = nn::AnyModule(
          register_module("left_tree", BasicBlock(in_channels, out_channels, stride)));
      right_ =
          nn::AnyModule(register_module("right_tree", BasicBlock(out_channels, out_channels, 1)));
    } else {
      left_ = nn::AnyModule(register_module(
          "left_tree", std::make_shared<Tree>(in_channels, out_channels, level - 1, stride)));
      right_ = nn::AnyModule(register_module(
          "right_tree", std::make_shared<Tree>(out_channels, out_channels, level - 1, 1)));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out1 = left_.forward(x);
    torch::Tensor out2 = right_.forward(out1);
    return root_(std::vector<torch::Tensor>{out1, out2});
  }

 private:
  Root root_;
  nn::AnyModule left_, right_;  // BasicBlock or Tree
};

using SimpleDLA = DlaNet<Tree>;

}  // namespace

std::shared_ptr<Net> MakeSimpleDLA(int64_t num_classes) {
  return std::make_shared<SimpleDLA>(num_classes);
}

}  // namespace elastic::models
