// The body DLA and SimpleDLA share (pytorch-cifar's dla.py and dla_simple.py
// differ only in their Tree): a stem of three conv-BN-ReLU layers, four trees
// of 64..512 channels, average pooling and a linear classifier.
#pragma once

#include <torch/nn/modules/linear.h>

#include <memory>

#include "models/layers.h"
#include "models/net.h"

namespace elastic::models {

// TreeT(in_channels, out_channels, level, stride) is one DLA tree.
template <typename TreeT>
class DlaNet : public Net {
 public:
  explicit DlaNet(int64_t num_classes)
      : base_(register_module("base", ConvBnRelu3x3(3, 16))),
        layer1_(register_module("layer1", ConvBnRelu3x3(16, 16))),
        layer2_(register_module("layer2", ConvBnRelu3x3(16, 32))),
        layer3_(register_module("layer3", std::make_shared<TreeT>(32, 64, 1, 1))),
        layer4_(register_module("layer4", std::make_shared<TreeT>(64, 128, 2, 2))),
        layer5_(register_module("layer5", std::make_shared<TreeT>(128, 256, 2, 2))),
        layer6_(register_module("layer6", std::make_shared<TreeT>(256, 512, 1, 2))),
        linear_(register_module("linear", torch::nn::Linear(512, num_classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = layer2_->forward(layer1_->forward(base_->forward(x)));
    out = layer6_->forward(layer5_->forward(layer4_->forward(layer3_->forward(out))));
    out = torch::avg_pool2d(out, 4).flatten(1);
    return linear_(out);
  }

 private:
  torch::nn::Sequential base_, layer1_, layer2_;
  std::shared_ptr<TreeT> layer3_, layer4_, layer5_, layer6_;
  torch::nn::Linear linear_;
};

}  // namespace elastic::models
