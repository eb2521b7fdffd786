#include "models/registry.h"

#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>

#include "models/zoo.h"

namespace elastic::models {
namespace {

using Factory = ModelFactory;

struct Entry {
  ModelInfo info;
  Factory make;
};

constexpr char kResNetPaper[] =
    "He et al., Deep Residual Learning for Image Recognition, arXiv:1512.03385";
constexpr char kRegNetPaper[] =
    "Radosavovic et al., Designing Network Design Spaces, arXiv:2003.13678";
constexpr char kResNeXtPaper[] =
    "Xie et al., Aggregated Residual Transformations for Deep Neural Networks, arXiv:1611.05431";
constexpr char kDlaPaper[] = "Yu et al., Deep Layer Aggregation, arXiv:1707.06484";

// The single list of models; AvailableModels() and CreateModel() both read it,
// so a model cannot be listed without being constructible or vice versa. The
// order is the pytorch-cifar results table, after the small test model; then
// the models registered from outside (RegisterModel), in their order.
std::vector<Entry>& Entries() {
  static std::vector<Entry> entries = {
      {{"resnet8", kResNetPaper}, MakeResNet8},
      {{"vgg16", "Simonyan & Zisserman, Very Deep Convolutional Networks, arXiv:1409.1556"},
       MakeVgg16},
      {{"resnet18", kResNetPaper}, MakeResNet18},
      {{"resnet50", kResNetPaper}, MakeResNet50},
      {{"resnet101", kResNetPaper}, MakeResNet101},
      {{"regnetx_200mf", kRegNetPaper}, MakeRegNetX200MF},
      {{"regnety_400mf", kRegNetPaper}, MakeRegNetY400MF},
      {{"mobilenetv2",
        "Sandler et al., MobileNetV2: Inverted Residuals and Linear Bottlenecks, "
        "arXiv:1801.04381"},
       MakeMobileNetV2},
      {{"resnext29_32x4d", kResNeXtPaper}, MakeResNeXt29_32x4d},
      {{"resnext29_2x64d", kResNeXtPaper}, MakeResNeXt29_2x64d},
      {{"simpledla", kDlaPaper}, MakeSimpleDLA},
      {{"densenet121", "Huang et al., Densely Connected Convolutional Networks, arXiv:1608.06993"},
       MakeDenseNet121},
      {{"preactresnet18",
        "He et al., Identity Mappings in Deep Residual Networks, arXiv:1603.05027"},
       MakePreActResNet18},
      {{"dpn92", "Chen et al., Dual Path Networks, arXiv:1707.01629"}, MakeDPN92},
      {{"dla", kDlaPaper}, MakeDLA},
  };
  return entries;
}

std::mutex& EntriesMutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

void RegisterModel(ModelInfo info, ModelFactory make) {
  if (info.name.empty()) throw std::invalid_argument("RegisterModel: a model needs a name");
  if (!make) throw std::invalid_argument("RegisterModel: model '" + info.name + "' has no factory");
  std::lock_guard<std::mutex> lock(EntriesMutex());
  for (const Entry& e : Entries()) {
    if (e.info.name == info.name)
      throw std::invalid_argument("RegisterModel: a model named '" + info.name + "' exists");
  }
  Entries().push_back({std::move(info), std::move(make)});
}

std::vector<ModelInfo> AvailableModels() {
  std::lock_guard<std::mutex> lock(EntriesMutex());
  std::vector<ModelInfo> out;
  for (const Entry& e : Entries()) out.push_back(e.info);
  return out;
}

std::shared_ptr<Net> CreateModel(const std::string& name, int64_t num_classes) {
  if (num_classes < 1) {
    throw std::invalid_argument("model '" + name + "': num_classes must be >= 1, got " +
                                std::to_string(num_classes));
  }
  std::string valid;
  Factory make;
  {
    std::lock_guard<std::mutex> lock(EntriesMutex());
    for (const Entry& e : Entries()) {
      if (e.info.name == name) make = e.make;
      valid += (valid.empty() ? "" : ", ") + e.info.name;
    }
  }
  if (make) return make(num_classes);
  throw std::invalid_argument("unknown model '" + name + "'; valid models: " + valid);
}

bool PrefersChannelsLast(const std::string& name) {
  // train_step_bench --sweep=all (batch 32, 1 thread, AMD Zen 5 with
  // AVX512-BF16, docs/benchmarks.md): channels-last was faster in fp32 and in
  // bf16 for these, by 1.02x (preactresnet18) to 1.62x (regnetx_200mf, bf16).
  // Not for vgg16 (0.97x / 0.98x: within noise, so unchanged) nor dpn92
  // (0.89x / 0.81x: its dual paths concatenate along channels, which in NHWC
  // memory is a strided copy of every pixel).
  static const std::set<std::string> faster = {"resnet8",     "resnet18",        "resnet50",
                                               "resnet101",   "regnetx_200mf",   "regnety_400mf",
                                               "mobilenetv2", "resnext29_32x4d", "resnext29_2x64d",
                                               "simpledla",   "densenet121",     "preactresnet18",
                                               "dla"};
  return faster.count(name) > 0;
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const torch::Tensor& p : module.parameters(/*recurse=*/true)) {
    if (p.requires_grad()) count += p.numel();
  }
  return count;
}

}  // namespace elastic::models
