// The model zoo by name: what `--model NAME` and `--list-models` see.
#ifndef ELASTIC_MODELS_REGISTRY_H_
#define ELASTIC_MODELS_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/net.h"

namespace elastic::models {

struct ModelInfo {
  std::string name;   // as on the command line, e.g. "resnet18"
  std::string paper;  // where the architecture comes from
};

// Every model, in a stable order, resnet8 first, then those registered.
std::vector<ModelInfo> AvailableModels();

using ModelFactory = std::function<std::shared_ptr<Net>(int64_t num_classes)>;

// Adds a model from outside the zoo (a program's own module): --model NAME
// and --list-models then know it. Throws std::invalid_argument for an empty or
// taken name or a missing factory.
void RegisterModel(ModelInfo info, ModelFactory make);

// Builds a freshly initialised model. Throws std::invalid_argument naming the
// unknown model and listing the valid names.
std::shared_ptr<Net> CreateModel(const std::string& name, int64_t num_classes = 10);

// Whether `name` trains faster with channels-last memory (NHWC) than
// contiguous (NCHW): --memory-format=auto. Measured per model with
// `train_step_bench --sweep=all` (docs/benchmarks.md); false for unknown names.
bool PrefersChannelsLast(const std::string& name);

// Number of trainable parameters (requires_grad), counted over all submodules.
int64_t CountParameters(const torch::nn::Module& module);

}  // namespace elastic::models

#endif  // ELASTIC_MODELS_REGISTRY_H_
