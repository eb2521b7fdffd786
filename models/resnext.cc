// ResNeXt-29 (32x4d and 2x64d) as in pytorch-cifar models/resnext.py: Xie et
// al., Aggregated Residual Transformations for Deep Neural Networks
// (arXiv:1611.05431). Three stages of three grouped-convolution blocks; the
// bottleneck width doubles at each stage.
#include <torch/nn/modules/linear.h>

#include "models/batch_norm_act.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

constexpr int64_t kExpansion = 2;

class Block : public nn::Module {
 public:
  Block(int64_t in_planes, int64_t cardinality, int64_t bottleneck_width, int64_t stride) {
    const int64_t group_width = cardinality * bottleneck_width;
    const int64_t out_planes = kExpansion * group_width;
    conv1_ = register_module("conv1", Conv(in_planes, group_width, 1));
    bn1_ = register_module("bn1", nn::BatchNorm2d(group_width));
    conv2_ = register_module("conv2", Conv(group_width, group_width, 3, stride, 1, cardinality));
    bn2_ = register_module("bn2", nn::BatchNorm2d(group_width));
    conv3_ = register_module("conv3", Conv(group_width, out_planes, 1));
    bn3_ = register_module("bn3", nn::BatchNorm2d(out_planes));
    if (stride != 1 || in_planes != out_planes) {
      shortcut_ = register_module("shortcut", ConvBn1x1(in_planes, out_planes, stride));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
    out = BatchNormAct(*bn2_, conv2_(out), Activation::kRelu);
    out = bn3_(conv3_(out));
    out = out + (shortcut_ ? shortcut_->forward(x) : x);
    return torch::relu(out);
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential shortcut_{nullptr};  // null: identity
};

class ResNeXt29 : public Net {
 public:
  ResNeXt29(int64_t cardinality, int64_t bottleneck_width, int64_t num_classes)
      : cardinality_(cardinality),
        width_(bottleneck_width),
        conv1_(register_module("conv1", Conv(3, 64, 1))),
        bn1_(register_module("bn1", nn::BatchNorm2d(64))),
        layer1_(register_module("layer1", MakeLayer(1))),
        layer2_(register_module("layer2", MakeLayer(2))),
        layer3_(register_module("layer3", MakeLayer(2))),
        linear_(register_module("linear",
                                nn::Linear(cardinality * bottleneck_width * 8, num_classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
    out = layer3_->forward(layer2_->forward(layer1_->forward(out)));
    out = torch::avg_pool2d(out, 8).flatten(1);
    return linear_(out);
  }

 private:
  nn::Sequential MakeLayer(int64_t stride) {
    nn::Sequential layer;
    for (int64_t i = 0; i < 3; ++i) {
      layer->push_back(
          std::make_shared<Block>(in_planes_, cardinality_, width_, i == 0 ? stride : 1));
      in_planes_ = kExpansion * cardinality_ * width_;
    }
    width_ *= 2;
    return layer;
  }

  const int64_t cardinality_;
  int64_t width_;  // bottleneck width of the stage being built
  int64_t in_planes_ = 64;
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Sequential layer1_, layer2_, layer3_;
  nn::Linear linear_;
};

}  // namespace

std::shared_ptr<Net> MakeResNeXt29_32x4d(int64_t num_classes) {
  return std::make_shared<ResNeXt29>(32, 4, num_classes);
}

std::shared_ptr<Net> MakeResNeXt29_2x64d(int64_t num_classes) {
  return std::make_shared<ResNeXt29>(2, 64, num_classes);
}

}  // namespace elastic::models
