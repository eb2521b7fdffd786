// VGG-16 with BatchNorm for CIFAR-10 as in pytorch-cifar models/vgg.py:
// Simonyan & Zisserman, Very Deep Convolutional Networks for Large-Scale
// Image Recognition (arXiv:1409.1556); five 2x2 max-pools take 32x32 to 1x1,
// so a single Linear(512, classes) classifies.
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include <utility>

#include "models/batch_norm_act.h"
#include "models/layers.h"
#include "models/zoo.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

constexpr int64_t kMaxPool = 0;  // marks a 2x2 max-pool in the configuration
constexpr int64_t kVgg16[] = {64,       64,  kMaxPool, 128, 128,      kMaxPool, 256, 256, 256,
                              kMaxPool, 512, 512,      512, kMaxPool, 512,      512, 512, kMaxPool};

class Vgg16 : public Net {
 public:
  explicit Vgg16(int64_t num_classes)
      : features_(register_module("features", MakeFeatures())),
        classifier_(register_module("classifier", nn::Linear(512, num_classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    return classifier_(Features(std::move(x)).flatten(1));
  }

 private:
  static nn::Sequential MakeFeatures() {
    nn::Sequential layers;
    int64_t in_channels = 3;
    for (int64_t v : kVgg16) {
      if (v == kMaxPool) {
        layers->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2)));
      } else {
        layers->push_back(Conv(in_channels, v, 3, 1, 1, 1, /*bias=*/true));
        layers->push_back(nn::BatchNorm2d(v));
        layers->push_back(nn::ReLU(nn::ReLUOptions(/*inplace=*/true)));
        in_channels = v;
      }
    }
    // A no-op kept so the layer indices match pytorch-cifar's state dict.
    layers->push_back(nn::AvgPool2d(nn::AvgPool2dOptions(1).stride(1)));
    return layers;
  }

  // features_ in order, each batch norm and the ReLU after it as one
  // BatchNormAct (the modules stay where pytorch-cifar's state dict has them).
  torch::Tensor Features(torch::Tensor x) {
    for (auto layer = features_->begin(); layer != features_->end(); ++layer) {
      if (auto* bn = layer->ptr()->as<nn::BatchNorm2dImpl>()) {
        x = BatchNormAct(*bn, x, Activation::kRelu);
        ++layer;  // the ReLU that MakeFeatures put after it
      } else {
        x = layer->forward(x);
      }
    }
    return x;
  }

  nn::Sequential features_;
  nn::Linear classifier_;
};

}  // namespace

std::shared_ptr<Net> MakeVgg16(int64_t num_classes) { return std::make_shared<Vgg16>(num_classes); }

}  // namespace elastic::models
