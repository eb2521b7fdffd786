// MobileNetV2 for CIFAR-10 as in pytorch-cifar models/mobilenetv2.py: Sandler
// et al., MobileNetV2: Inverted Residuals and Linear Bottlenecks
// (arXiv:1801.04381), with stride 1 in the stem and the second stage so
// 32x32 inputs end at 4x4.
#include <torch/nn/modules/linear.h>

#include "models/batch_norm_act.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

// Expand (1x1), depthwise (3x3), project (1x1, linear). Residual only when
// the block keeps the resolution; a 1x1 projection when channels change.
class Block : public nn::Module {
 public:
  Block(int64_t in_planes, int64_t out_planes, int64_t expansion, int64_t stride)
      : stride_(stride) {
    const int64_t planes = expansion * in_planes;
    conv1_ = register_module("conv1", Conv(in_planes, planes, 1));
    bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
    conv2_ = register_module("conv2", Conv(planes, planes, 3, stride, 1, /*groups=*/planes));
    bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
    conv3_ = register_module("conv3", Conv(planes, out_planes, 1));
    bn3_ = register_module("bn3", nn::BatchNorm2d(out_planes));
    if (stride == 1 && in_planes != out_planes) {
      shortcut_ = register_module("shortcut", ConvBn1x1(in_planes, out_planes, 1));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
    out = BatchNormAct(*bn2_, conv2_(out), Activation::kRelu);
    out = bn3_(conv3_(out));
    if (stride_ != 1) return out;
    return out + (shortcut_ ? shortcut_->forward(x) : x);
  }

 private:
  int64_t stride_;
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential shortcut_{nullptr};  // null: identity
};

struct Stage {
  int64_t expansion, out_planes, num_blocks, stride;
};
constexpr Stage kStages[] = {{1, 16, 1, 1}, {6, 24, 2, 1},  {6, 32, 3, 2}, {6, 64, 4, 2},
                             {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};

class MobileNetV2 : public Net {
 public:
  explicit MobileNetV2(int64_t num_classes)
      : conv1_(register_module("conv1", Conv(3, 32, 3, 1, 1))),
        bn1_(register_module("bn1", nn::BatchNorm2d(32))),
        layers_(register_module("layers", MakeLayers(32))),
        conv2_(register_module("conv2", Conv(320, 1280, 1))),
        bn2_(register_module("bn2", nn::BatchNorm2d(1280))),
        linear_(register_module("linear", nn::Linear(1280, num_classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
    out = layers_->forward(out);
    out = BatchNormAct(*bn2_, conv2_(out), Activation::kRelu);
    out = torch::avg_pool2d(out, 4).flatten(1);
    return linear_(out);
  }

 private:
  static nn::Sequential MakeLayers(int64_t in_planes) {
    nn::Sequential layers;
    for (const Stage& s : kStages) {
      for (int64_t i = 0; i < s.num_blocks; ++i) {
        layers->push_back(
            std::make_shared<Block>(in_planes, s.out_planes, s.expansion, i == 0 ? s.stride : 1));
        in_planes = s.out_planes;
      }
    }
    return layers;
  }

  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Sequential layers_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Linear linear_;
};

}  // namespace

std::shared_ptr<Net> MakeMobileNetV2(int64_t num_classes) {
  return std::make_shared<MobileNetV2>(num_classes);
}

}  // namespace elastic::models
