// ResNet-18/50/101 for CIFAR-10 as in pytorch-cifar models/resnet.py:
// He et al., Deep Residual Learning for Image Recognition (arXiv:1512.03385),
// with a 3x3 stride-1 stem (no max-pool) for 32x32 inputs.
#include <torch/nn/modules/linear.h>

#include <array>

#include "models/batch_norm_act.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

template <typename Block>  // BasicBlockImpl or BottleneckImpl
class ResNet : public Net {
 public:
  ResNet(const std::array<int64_t, 4>& num_blocks, int64_t num_classes)
      : conv1_(register_module("conv1", Conv(3, 64, 3, 1, 1))),
        bn1_(register_module("bn1", nn::BatchNorm2d(64))),
        layer1_(register_module("layer1", MakeLayer(64, num_blocks[0], 1))),
        layer2_(register_module("layer2", MakeLayer(128, num_blocks[1], 2))),
        layer3_(register_module("layer3", MakeLayer(256, num_blocks[2], 2))),
        layer4_(register_module("layer4", MakeLayer(512, num_blocks[3], 2))),
        linear_(register_module("linear", nn::Linear(512 * Block::kExpansion, num_classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
    out = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(out))));
    out = torch::avg_pool2d(out, 4).flatten(1);
    return linear_(out);
  }

 private:
  // The first block of a stage strides; the others keep the shape.
  nn::Sequential MakeLayer(int64_t planes, int64_t num_blocks, int64_t stride) {
    nn::Sequential layer;
    for (int64_t i = 0; i < num_blocks; ++i) {
      layer->push_back(std::make_shared<Block>(in_planes_, planes, i == 0 ? stride : 1));
      in_planes_ = planes * Block::kExpansion;
    }
    return layer;
  }

  int64_t in_planes_ = 64;
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Sequential layer1_, layer2_, layer3_, layer4_;
  nn::Linear linear_;
};

}  // namespace

std::shared_ptr<Net> MakeResNet18(int64_t num_classes) {
  return std::make_shared<ResNet<BasicBlockImpl>>(std::array<int64_t, 4>{2, 2, 2, 2}, num_classes);
}

std::shared_ptr<Net> MakeResNet50(int64_t num_classes) {
  return std::make_shared<ResNet<BottleneckImpl>>(std::array<int64_t, 4>{3, 4, 6, 3}, num_classes);
}

std::shared_ptr<Net> MakeResNet101(int64_t num_classes) {
  return std::make_shared<ResNet<BottleneckImpl>>(std::array<int64_t, 4>{3, 4, 23, 3}, num_classes);
}

}  // namespace elastic::models
