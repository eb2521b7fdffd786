// DenseNet-121 for CIFAR-10 as in pytorch-cifar models/densenet.py: Huang et
// al., Densely Connected Convolutional Networks (arXiv:1608.06993), growth
// rate 32, blocks of 6/12/24/16 bottleneck layers, compression 0.5.
#include <torch/nn/modules/linear.h>

#include <array>
#include <vector>

#include "models/batch_norm_act.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

constexpr int64_t kGrowthRate = 32;
constexpr std::array<int64_t, 4> kBlocks = {6, 12, 24, 16};

// BN-ReLU-1x1 conv to 4k channels, BN-ReLU-3x3 conv to k; the k new channels
// are put in front of the input's.
class Bottleneck : public nn::Module {
 public:
  Bottleneck(int64_t in_planes, int64_t growth_rate)
      : bn1_(register_module("bn1", nn::BatchNorm2d(in_planes))),
        conv1_(register_module("conv1", Conv(in_planes, 4 * growth_rate, 1))),
        bn2_(register_module("bn2", nn::BatchNorm2d(4 * growth_rate))),
        conv2_(register_module("conv2", Conv(4 * growth_rate, growth_rate, 3, 1, 1))) {}

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = conv1_(BatchNormAct(*bn1_, x, Activation::kRelu));
    out = conv2_(BatchNormAct(*bn2_, out, Activation::kRelu));
    return torch::cat({out, x}, 1);
  }

 private:
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn2_;
  nn::Conv2d conv2_;
};

// BN-ReLU-1x1 conv, then 2x2 average pooling between dense blocks.
class Transition : public nn::Module {
 public:
  Transition(int64_t in_planes, int64_t out_planes)
      : bn_(register_module("bn", nn::BatchNorm2d(in_planes))),
        conv_(register_module("conv", Conv(in_planes, out_planes, 1))) {}

  torch::Tensor forward(torch::Tensor x) {
    return torch::avg_pool2d(conv_(BatchNormAct(*bn_, x, Activation::kRelu)), 2);
  }

 private:
  nn::BatchNorm2d bn_;
  nn::Conv2d conv_;
};

class DenseNet121 : public Net {
 public:
  explicit DenseNet121(int64_t num_classes) {
    int64_t planes = 2 * kGrowthRate;
    conv1_ = register_module("conv1", Conv(3, planes, 3, 1, 1));
    for (size_t i = 0; i < kBlocks.size(); ++i) {
      nn::Sequential dense;
      for (int64_t j = 0; j < kBlocks[i]; ++j) {
        dense->push_back(std::make_shared<Bottleneck>(planes, kGrowthRate));
        planes += kGrowthRate;
      }
      dense_.push_back(register_module("dense" + std::to_string(i + 1), dense));
      if (i + 1 < kBlocks.size()) {
        const int64_t out_planes = planes / 2;  // floor(planes * reduction 0.5)
        trans_.push_back(register_module("trans" + std::to_string(i + 1),
                                         std::make_shared<Transition>(planes, out_planes)));
        planes = out_planes;
      }
    }
    bn_ = register_module("bn", nn::BatchNorm2d(planes));
    linear_ = register_module("linear", nn::Linear(planes, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = conv1_(x);
    for (size_t i = 0; i < dense_.size(); ++i) {
      out = dense_[i]->forward(out);
      if (i < trans_.size()) out = trans_[i]->forward(out);
    }
    out = torch::avg_pool2d(BatchNormAct(*bn_, out, Activation::kRelu), 4).flatten(1);
    return linear_(out);
  }

 private:
  nn::Conv2d conv1_{nullptr};
  std::vector<nn::Sequential> dense_;               // dense1..dense4
  std::vector<std::shared_ptr<Transition>> trans_;  // trans1..trans3, after dense1..dense3
  nn::BatchNorm2d bn_{nullptr};
  nn::Linear linear_{nullptr};
};

}  // namespace

std::shared_ptr<Net> MakeDenseNet121(int64_t num_classes) {
  return std::make_shared<DenseNet121>(num_classes);
}

}  // namespace elastic::models
