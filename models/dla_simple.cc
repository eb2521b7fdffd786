// SimpleDLA as in pytorch-cifar models/dla_simple.py: a simplified Deep Layer
// Aggregation (Yu et al., arXiv:1707.06484) in which every tree node joins
// just its two children with a Root.
#include <torch/nn/modules/linear.h>

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

class SimpleDLA : public Net {
 public:
  explicit SimpleDLA(int64_t num_classes)
      : base_(register_module("base", ConvBnRelu3x3(3, 16))),
        layer1_(register_module("layer1", ConvBnRelu3x3(16, 16))),
        layer2_(register_module("layer2", ConvBnRelu3x3(16, 32))),
        layer3_(register_module("layer3", std::make_shared<Tree>(32, 64, 1, 1))),
        layer4_(register_module("layer4", std::make_shared<Tree>(64, 128, 2, 2))),
        layer5_(register_module("layer5", std::make_shared<Tree>(128, 256, 2, 2))),
        layer6_(register_module("layer6", std::make_shared<Tree>(256, 512, 1, 2))),
        linear_(register_module("linear", nn::Linear(512, num_classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = layer2_->forward(layer1_->forward(base_->forward(x)));
    out = layer6_->forward(layer5_->forward(layer4_->forward(layer3_->forward(out))));
    out = torch::avg_pool2d(out, 4).flatten(1);
    return linear_(out);
  }

 private:
  nn::Sequential base_, layer1_, layer2_;
  std::shared_ptr<Tree> layer3_, layer4_, layer5_, layer6_;
  nn::Linear linear_;
};

}  // namespace

std::shared_ptr<Net> MakeSimpleDLA(int64_t num_classes) {
  return std::make_shared<SimpleDLA>(num_classes);
}

}  // namespace elastic::models
