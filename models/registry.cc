#include "models/registry.h"

#include <functional>
#include <stdexcept>

#include "models/zoo.h"

namespace elastic::models {
namespace {

using Factory = std::function<std::shared_ptr<Net>(int64_t num_classes)>;

struct Entry {
  ModelInfo info;
  Factory make;
};

// The single list of models; AvailableModels() and CreateModel() both read it,
// so a model cannot be listed without being constructible or vice versa.
const std::vector<Entry>& Entries() {
  static const std::vector<Entry> entries = {
      {{"resnet8", "He et al., Deep Residual Learning for Image Recognition, arXiv:1512.03385"},
       MakeResNet8},
  };
  return entries;
}

}  // namespace

const std::vector<ModelInfo>& AvailableModels() {
  static const std::vector<ModelInfo> infos = [] {
    std::vector<ModelInfo> out;
    for (const Entry& e : Entries()) out.push_back(e.info);
    return out;
  }();
  return infos;
}

std::shared_ptr<Net> CreateModel(const std::string& name, int64_t num_classes) {
  if (num_classes < 1) {
    throw std::invalid_argument("model '" + name + "': num_classes must be >= 1, got " +
                                std::to_string(num_classes));
  }
  std::string valid;
  for (const Entry& e : Entries()) {
    if (e.info.name == name) return e.make(num_classes);
    valid += (valid.empty() ? "" : ", ") + e.info.name;
  }
  throw std::invalid_argument("unknown model '" + name + "'; valid models: " + valid);
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const torch::Tensor& p : module.parameters(/*recurse=*/true)) {
    if (p.requires_grad()) count += p.numel();
  }
  return count;
}

}  // namespace elastic::models
