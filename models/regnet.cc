// RegNetX-200MF and RegNetY-400MF as in pytorch-cifar models/regnet.py:
// Radosavovic et al., Designing Network Design Spaces (arXiv:2003.13678).
// Y models add a squeeze-and-excitation unit to each block.
#include <torch/nn/modules/linear.h>

#include <array>
#include <cmath>

#include "models/batch_norm_act.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

struct RegNetConfig {
  std::array<int64_t, 4> depths, widths, strides;
  int64_t group_width;
  double bottleneck_ratio;
  double se_ratio;  // 0: no squeeze-and-excitation
};

// Python's round() rounds halves to even; nearbyint does the same under the
// default rounding mode, so widths match the original exactly.
int64_t Round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

// Squeeze-and-excitation: per-channel gates from the globally pooled input.
class SqueezeExcite : public nn::Module {
 public:
  SqueezeExcite(int64_t in_planes, int64_t se_planes)
      : se1_(register_module("se1", Conv(in_planes, se_planes, 1, 1, 0, 1, /*bias=*/true))),
        se2_(register_module("se2", Conv(se_planes, in_planes, 1, 1, 0, 1, /*bias=*/true))) {}

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor gate = torch::adaptive_avg_pool2d(x, {1, 1});
    gate = se2_(torch::relu(se1_(gate))).sigmoid();
    return x * gate;
  }

 private:
  nn::Conv2d se1_, se2_;
};

class Block : public nn::Module {
 public:
  Block(int64_t w_in, int64_t w_out, int64_t stride, const RegNetConfig& cfg) {
    const int64_t w_b = Round(w_out * cfg.bottleneck_ratio);
    conv1_ = register_module("conv1", Conv(w_in, w_b, 1));
    bn1_ = register_module("bn1", nn::BatchNorm2d(w_b));
    conv2_ = register_module("conv2", Conv(w_b, w_b, 3, stride, 1, w_b / cfg.group_width));
    bn2_ = register_module("bn2", nn::BatchNorm2d(w_b));
    if (cfg.se_ratio > 0) {
      se_ = register_module("se", std::make_shared<SqueezeExcite>(w_b, Round(w_in * cfg.se_ratio)));
    }
    conv3_ = register_module("conv3", Conv(w_b, w_out, 1));
    bn3_ = register_module("bn3", nn::BatchNorm2d(w_out));
    if (stride != 1 || w_in != w_out) {
      shortcut_ = register_module("shortcut", ConvBn1x1(w_in, w_out, stride));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
    out = BatchNormAct(*bn2_, conv2_(out), Activation::kRelu);
    if (se_) out = se_->forward(out);
    out = bn3_(conv3_(out));
    out = out + (shortcut_ ? shortcut_->forward(x) : x);
    return torch::relu(out);
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  std::shared_ptr<SqueezeExcite> se_;  // null for RegNetX
  nn::Sequential shortcut_{nullptr};   // null: identity
};

class RegNet : public Net {
 public:
  RegNet(const RegNetConfig& cfg, int64_t num_classes)
      : conv1_(register_module("conv1", Conv(3, 64, 3, 1, 1))),
        bn1_(register_module("bn1", nn::BatchNorm2d(64))) {
    int64_t in_planes = 64;
    for (int stage = 0; stage < 4; ++stage) {
      nn::Sequential layer;
      for (int64_t i = 0; i < cfg.depths[stage]; ++i) {
        const int64_t stride = i == 0 ? cfg.strides[stage] : 1;
        layer->push_back(std::make_shared<Block>(in_planes, cfg.widths[stage], stride, cfg));
        in_planes = cfg.widths[stage];
      }
      layers_[stage] = register_module("layer" + std::to_string(stage + 1), layer);
    }
    linear_ = register_module("linear", nn::Linear(cfg.widths[3], num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
    for (nn::Sequential& layer : layers_) out = layer->forward(out);
    out = torch::adaptive_avg_pool2d(out, {1, 1}).flatten(1);
    return linear_(out);
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  std::array<nn::Sequential, 4> layers_ = {nullptr, nullptr, nullptr, nullptr};
  nn::Linear linear_{nullptr};
};

}  // namespace

std::shared_ptr<Net> MakeRegNetX200MF(int64_t num_classes) {
  const RegNetConfig cfg{{1, 1, 4, 7}, {24, 56, 152, 368}, {1, 1, 2, 2}, 8, 1.0, 0.0};
  return std::make_shared<RegNet>(cfg, num_classes);
}

std::shared_ptr<Net> MakeRegNetY400MF(int64_t num_classes) {
  const RegNetConfig cfg{{1, 2, 7, 12}, {32, 64, 160, 384}, {1, 1, 2, 2}, 16, 1.0, 0.25};
  return std::make_shared<RegNet>(cfg, num_classes);
}

}  // namespace elastic::models
