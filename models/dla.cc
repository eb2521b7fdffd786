// DLA as in pytorch-cifar models/dla.py: Deep Layer Aggregation (Yu et al.,
// arXiv:1707.06484). A tree of level n feeds its input through subtrees of
// levels n-1 .. 1 and two BasicBlocks, and one Root aggregates all of their
// outputs plus a strided BasicBlock of the input.

#include "models/dla_net.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

class Tree : public nn::Module {
 public:
  Tree(int64_t in_channels, int64_t out_channels, int level, int64_t stride)
      : root_(register_module("root",
                              Root((level == 1 ? 2 : level + 2) * out_channels, out_channels))) {
    if (level == 1) {
      left_node_ = register_module("left_node", BasicBlock(in_channels, out_channels, stride));
    } else {
      for (int i = level - 1; i >= 1; --i) {
        levels_.push_back(
            register_module("level_" + std::to_string(i),
                            std::make_shared<Tree>(in_channels, out_channels, i, stride)));
      }
      prev_root_ = register_module("prev_root", BasicBlock(in_channels, out_channels, stride));
      left_node_ = register_module("left_node", BasicBlock(out_channels, out_channels, 1));
    }
    right_node_ = register_module("right_node", BasicBlock(out_channels, out_channels, 1));
  }

  torch::Tensor forward(torch::Tensor x) {
    std::vector<torch::Tensor> xs;
    if (prev_root_) xs.push_back(prev_root_(x));
    for (const auto& level : levels_) {  // from level n-1 down to 1
      x = level->forward(x);
      xs.push_back(x);
    }
    x = left_node_(x);
    xs.push_back(x);
    x = right_node_(x);
    xs.push_back(x);
    return root_(xs);
  }

 private:
  Root root_;
  std::vector<std::shared_ptr<Tree>> levels_;  // empty at level 1
  BasicBlock prev_root_{nullptr};              // null at level 1
  BasicBlock left_node_{nullptr}, right_node_{nullptr};
};

using Dla = DlaNet<Tree>;

}  // namespace

std::shared_ptr<Net> MakeDLA(int64_t num_classes) { return std::make_shared<Dla>(num_classes); }

}  // namespace elastic::models
