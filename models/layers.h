// Building blocks shared by several models of the zoo (internal to models/).
// Parameter names follow pytorch-cifar (conv1, bn1, ..., shortcut) so a state
// dict reads the same in both worlds.
#ifndef ELASTIC_MODELS_LAYERS_H_
#define ELASTIC_MODELS_LAYERS_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <vector>

namespace elastic::models {

// nn.Conv2d with a square kernel; pytorch-cifar leaves out the bias wherever
// a BatchNorm follows, hence the default.
torch::nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1,
                       int64_t padding = 0, int64_t groups = 1, bool bias = false);

// 1x1 convolution + BatchNorm: the projection shortcut of the residual blocks.
torch::nn::Sequential ConvBn1x1(int64_t in, int64_t out, int64_t stride);

// 3x3 convolution (stride 1, padding 1) + BatchNorm + ReLU: the DLA stems.
torch::nn::Sequential ConvBnRelu3x3(int64_t in, int64_t out);

// Two 3x3 convolutions with a residual connection (ResNet paper, Fig. 2 left).
class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride = 1);
  torch::Tensor forward(torch::Tensor x);

 private:
  // Declared, hence registered, in pytorch-cifar's order: the parameter order
  // (state dict, gradient buckets) matches the original's.
  torch::nn::Conv2d conv1_;
  torch::nn::BatchNorm2d bn1_;
  torch::nn::Conv2d conv2_;
  torch::nn::BatchNorm2d bn2_;
  torch::nn::Sequential shortcut_{nullptr};  // null: identity
};
TORCH_MODULE(BasicBlock);

// 1x1 reduce, 3x3, 1x1 expand by 4 (ResNet paper, Fig. 5 right).
class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride = 1);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1_;  // members in pytorch-cifar's order, as above
  torch::nn::BatchNorm2d bn1_;
  torch::nn::Conv2d conv2_;
  torch::nn::BatchNorm2d bn2_;
  torch::nn::Conv2d conv3_;
  torch::nn::BatchNorm2d bn3_;
  torch::nn::Sequential shortcut_{nullptr};  // null: identity
};
TORCH_MODULE(Bottleneck);

// DLA aggregation node: concatenate the inputs along channels, then
// 1x1 conv + BN + ReLU (Deep Layer Aggregation, arXiv:1707.06484).
class RootImpl : public torch::nn::Module {
 public:
  RootImpl(int64_t in_channels, int64_t out_channels);
  torch::Tensor forward(const std::vector<torch::Tensor>& xs);

 private:
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::BatchNorm2d bn_{nullptr};
};
TORCH_MODULE(Root);

}  // namespace elastic::models

#endif  // ELASTIC_MODELS_LAYERS_H_
