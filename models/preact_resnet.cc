// PreActResNet-18 as in pytorch-cifar models/preact_resnet.py: He et al.,
// Identity Mappings in Deep Residual Networks (arXiv:1603.05027). BN and ReLU
// come before each convolution; the shortcut is a bare 1x1 convolution of the
// pre-activated input.
#include <torch/nn/modules/linear.h>

#include "models/batch_norm_act.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

class PreActBlock : public nn::Module {
 public:
  PreActBlock(int64_t in_planes, int64_t planes, int64_t stride)
      : bn1_(register_module("bn1", nn::BatchNorm2d(in_planes))),
        conv1_(register_module("conv1", Conv(in_planes, planes, 3, stride, 1))),
        bn2_(register_module("bn2", nn::BatchNorm2d(planes))),
        conv2_(register_module("conv2", Conv(planes, planes, 3, 1, 1))) {
    if (stride != 1 || in_planes != planes) {
      shortcut_ = register_module("shortcut", nn::Sequential(Conv(in_planes, planes, 1, stride)));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = BatchNormAct(*bn1_, x, Activation::kRelu);
    torch::Tensor shortcut = shortcut_ ? shortcut_->forward(out) : x;
    out = conv1_(out);
    out = conv2_(BatchNormAct(*bn2_, out, Activation::kRelu));
    return out + shortcut;
  }

 private:
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn2_;
  nn::Conv2d conv2_;
  nn::Sequential shortcut_{nullptr};  // null: identity
};

class PreActResNet18 : public Net {
 public:
  explicit PreActResNet18(int64_t num_classes)
      : conv1_(register_module("conv1", Conv(3, 64, 3, 1, 1))),
        layer1_(register_module("layer1", MakeLayer(64, 1))),
        layer2_(register_module("layer2", MakeLayer(128, 2))),
        layer3_(register_module("layer3", MakeLayer(256, 2))),
        layer4_(register_module("layer4", MakeLayer(512, 2))),
        linear_(register_module("linear", nn::Linear(512, num_classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = conv1_(x);
    out = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(out))));
    out = torch::avg_pool2d(out, 4).flatten(1);
    return linear_(out);
  }

 private:
  // Two blocks per stage; the first one strides.
  nn::Sequential MakeLayer(int64_t planes, int64_t stride) {
    nn::Sequential layer(std::make_shared<PreActBlock>(in_planes_, planes, stride),
                         std::make_shared<PreActBlock>(planes, planes, 1));
    in_planes_ = planes;
    return layer;
  }

  int64_t in_planes_ = 64;
  nn::Conv2d conv1_;
  nn::Sequential layer1_, layer2_, layer3_, layer4_;
  nn::Linear linear_;
};

}  // namespace

std::shared_ptr<Net> MakePreActResNet18(int64_t num_classes) {
  return std::make_shared<PreActResNet18>(num_classes);
}

}  // namespace elastic::models
