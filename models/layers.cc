#include "models/layers.h"

#include <torch/nn/modules/activation.h>

#include "models/batch_norm_act.h"

namespace elastic::models {

namespace nn = torch::nn;

nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                int64_t groups, bool bias) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).groups(groups).bias(bias));
}

nn::Sequential ConvBn1x1(int64_t in, int64_t out, int64_t stride) {
  return nn::Sequential(Conv(in, out, 1, stride), nn::BatchNorm2d(out));
}

nn::Sequential ConvBnRelu3x3(int64_t in, int64_t out) {
  return nn::Sequential(Conv(in, out, 3, 1, 1), nn::BatchNorm2d(out),
                        nn::ReLU(nn::ReLUOptions(/*inplace=*/true)));
}

BasicBlockImpl::BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride)
    : conv1_(register_module("conv1", Conv(in_planes, planes, 3, stride, 1))),
      bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
      conv2_(register_module("conv2", Conv(planes, planes, 3, 1, 1))),
      bn2_(register_module("bn2", nn::BatchNorm2d(planes))) {
  if (stride != 1 || in_planes != kExpansion * planes) {
    shortcut_ = register_module("shortcut", ConvBn1x1(in_planes, kExpansion * planes, stride));
  }
}

namespace {

// x through the projection (1x1 conv, batch norm), or x itself.
torch::Tensor Shortcut(nn::Sequential& shortcut, const torch::Tensor& x) {
  if (!shortcut) return x;
  auto& conv = *shortcut[0]->as<nn::Conv2dImpl>();
  auto& bn = *shortcut[1]->as<nn::BatchNorm2dImpl>();
  return BatchNormAct(bn, conv.forward(x), Activation::kIdentity);
}

}  // namespace

// Batch norm, the residual add and ReLU in one pass (batch_norm_act.h).
torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
  return BatchNormAct(*bn2_, conv2_(out), Activation::kRelu, Shortcut(shortcut_, x));
}

BottleneckImpl::BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride)
    : conv1_(register_module("conv1", Conv(in_planes, planes, 1))),
      bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
      conv2_(register_module("conv2", Conv(planes, planes, 3, stride, 1))),
      bn2_(register_module("bn2", nn::BatchNorm2d(planes))),
      conv3_(register_module("conv3", Conv(planes, kExpansion * planes, 1))),
      bn3_(register_module("bn3", nn::BatchNorm2d(kExpansion * planes))) {
  if (stride != 1 || in_planes != kExpansion * planes) {
    shortcut_ = register_module("shortcut", ConvBn1x1(in_planes, kExpansion * planes, stride));
  }
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  torch::Tensor out = BatchNormAct(*bn1_, conv1_(x), Activation::kRelu);
  out = BatchNormAct(*bn2_, conv2_(out), Activation::kRelu);
  return BatchNormAct(*bn3_, conv3_(out), Activation::kRelu, Shortcut(shortcut_, x));
}

RootImpl::RootImpl(int64_t in_channels, int64_t out_channels)
    : conv_(register_module("conv", Conv(in_channels, out_channels, 1))),
      bn_(register_module("bn", nn::BatchNorm2d(out_channels))) {}

torch::Tensor RootImpl::forward(const std::vector<torch::Tensor>& xs) {
  return BatchNormAct(*bn_, conv_(torch::cat(xs, 1)), Activation::kRelu);
}

}  // namespace elastic::models
