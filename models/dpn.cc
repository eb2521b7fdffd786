// DPN-92 for CIFAR-10 as in pytorch-cifar models/dpn.py: Chen et al., Dual
// Path Networks (arXiv:1707.01629). Each block's output is split in a
// residual path (added) and a densely connected path (concatenated).
#include <torch/nn/modules/linear.h>

#include <array>
#include <vector>

#include "models/batch_norm_act.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

class Bottleneck : public nn::Module {
 public:
  Bottleneck(int64_t last_planes, int64_t in_planes, int64_t out_planes, int64_t dense_depth,
             int64_t stride, bool first_layer)
      : out_planes_(out_planes),
        conv1_(register_module("conv1", Conv(last_planes, in_planes, 1))),
        bn1_(register_module("bn1", nn::BatchNorm2d(in_planes))),
        conv2_(register_module("conv2", Conv(in_planes, in_planes, 3, stride, 1, /*groups=*/32))),
        bn2_(register_module("bn2", nn::BatchNorm2d(in_planes))),
        conv3_(register_module("conv3", Conv(in_planes, out_planes + dense_depth, 1))),
        bn3_(register_module("bn3", nn::BatchNorm2d(out_planes + dense_depth))) {
    if (first_layer) {
      shortcut_ =
          register_module("shortcut", ConvBn1x1(last_planes, out_planes + dense_depth, stride));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
    out = BatchNormAct(*bn2_, conv2_(out), Activation::kRelu);
    out = bn3_(conv3_(out));
    if (shortcut_) x = shortcut_->forward(x);
    const int64_t d = out_planes_;
    // [residual sum | dense features so far | this block's new dense features]
    out = torch::cat({x.slice(1, 0, d) + out.slice(1, 0, d), x.slice(1, d), out.slice(1, d)}, 1);
    return torch::relu(out);
  }

 private:
  int64_t out_planes_;
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Conv2d conv3_;
  nn::BatchNorm2d bn3_;
  nn::Sequential shortcut_{nullptr};  // null: identity
};

struct Stage {
  int64_t in_planes, out_planes, num_blocks, dense_depth, stride;
};
constexpr std::array<Stage, 4> kDpn92 = {
    {{96, 256, 3, 16, 1}, {192, 512, 4, 32, 2}, {384, 1024, 20, 24, 2}, {768, 2048, 3, 128, 2}}};

class Dpn92 : public Net {
 public:
  explicit Dpn92(int64_t num_classes)
      : conv1_(register_module("conv1", Conv(3, 64, 3, 1, 1))),
        bn1_(register_module("bn1", nn::BatchNorm2d(64))) {
    int64_t last_planes = 64;
    for (size_t i = 0; i < kDpn92.size(); ++i) {
      const Stage& s = kDpn92[i];
      nn::Sequential layer;
      for (int64_t j = 0; j < s.num_blocks; ++j) {
        layer->push_back(std::make_shared<Bottleneck>(last_planes, s.in_planes, s.out_planes,
                                                      s.dense_depth, j == 0 ? s.stride : 1,
                                                      /*first_layer=*/j == 0));
        last_planes = s.out_planes + (j + 2) * s.dense_depth;
      }
      layers_.push_back(register_module("layer" + std::to_string(i + 1), layer));
    }
    linear_ = register_module("linear", nn::Linear(last_planes, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
    for (nn::Sequential& layer : layers_) out = layer->forward(out);
    out = torch::avg_pool2d(out, 4).flatten(1);
    return linear_(out);
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  std::vector<nn::Sequential> layers_;  // layer1..layer4
  nn::Linear linear_{nullptr};
};

}  // namespace

std::shared_ptr<Net> MakeDPN92(int64_t num_classes) { return std::make_shared<Dpn92>(num_classes); }

}  // namespace elastic::models
