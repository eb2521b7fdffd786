// Prints the model zoo: every model with its parameter count, or with
// `--layers NAME` the parameters and buffers of one model, named and shaped as
// in a state dict (the names follow pytorch-cifar's, so the two can be diffed).
//
//   bazel run //models:model_info
//   bazel run //models:model_info -- --layers resnet18
#include <cstdio>
#include <exception>
#include <string>

#include "models/registry.h"

namespace {

using elastic::models::AvailableModels;
using elastic::models::CountParameters;
using elastic::models::CreateModel;
using elastic::models::ModelInfo;

void PrintTable() {
  std::printf("%-16s %12s  %s\n", "model", "parameters", "paper");
  for (const ModelInfo& m : AvailableModels()) {
    std::printf("%-16s %12lld  %s\n", m.name.c_str(),
                static_cast<long long>(CountParameters(*CreateModel(m.name))), m.paper.c_str());
  }
}

std::string Shape(const torch::Tensor& t) {
  std::string s;
  for (int64_t d : t.sizes()) s += (s.empty() ? "" : ",") + std::to_string(d);
  return "[" + s + "]";
}

void PrintLayers(const std::string& name) {
  auto net = CreateModel(name);
  for (const auto& p : net->named_parameters()) {
    std::printf("%s %s\n", p.key().c_str(), Shape(p.value()).c_str());
  }
  for (const auto& b : net->named_buffers()) {
    std::printf("%s %s\n", b.key().c_str(), Shape(b.value()).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string flag = argc > 1 ? argv[1] : "";
    if (argc == 1) {
      PrintTable();
    } else if (argc == 3 && flag == "--layers") {
      PrintLayers(argv[2]);
    } else {
      std::fprintf(stderr, "usage: %s [--layers MODEL]\n", argv[0]);
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_info: %s\n", e.what());
    return 1;
  }
  return 0;
}
