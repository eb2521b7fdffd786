// ResNet-8: the small, fast model for CPU tests and quick runs (~78k
// parameters). The CIFAR ResNet of He et al. (arXiv:1512.03385, section 4.2)
// with n = 1 block per stage and 16/32/64 channels, but with projection
// shortcuts (1x1 conv + BN) where the shape changes.
#include <torch/nn/modules/linear.h>

#include "models/batch_norm_act.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

class ResNet8 : public Net {
 public:
  explicit ResNet8(int64_t num_classes)
      : conv1_(register_module("conv1", Conv(3, 16, 3, 1, 1))),
        bn1_(register_module("bn1", nn::BatchNorm2d(16))),
        layer1_(register_module("layer1", BasicBlock(16, 16, 1))),
        layer2_(register_module("layer2", BasicBlock(16, 32, 2))),
        layer3_(register_module("layer3", BasicBlock(32, 64, 2))),
        linear_(register_module("linear", nn::Linear(64, num_classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
    out = layer3_(layer2_(layer1_(out)));
    out = torch::adaptive_avg_pool2d(out, {1, 1}).flatten(1);
    return linear_(out);
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  BasicBlock layer1_, layer2_, layer3_;
  nn::Linear linear_;
};

}  // namespace

std::shared_ptr<Net> MakeResNet8(int64_t num_classes) {
  return std::make_shared<ResNet8>(num_classes);
}

}  // namespace elastic::models
