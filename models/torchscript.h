// TorchScript modules saved from Python (torch.jit.script(model).save(path))
// as models the trainer trains natively: a TorchScriptNet is a Net whose
// parameters and buffers are the module's own tensors, registered under the
// same dotted names as in Python's state_dict(), so everything that works on a
// Net (the optimizer, the allreduce, the state, the checkpoints, channels-last,
// moving to a GPU) works on the module's weights in place.
#ifndef ELASTIC_MODELS_TORCHSCRIPT_H_
#define ELASTIC_MODELS_TORCHSCRIPT_H_

#include <torch/script.h>

#include <memory>
#include <string>
#include <vector>

#include "models/model_file.h"
#include "models/net.h"

namespace elastic::models {

class TorchScriptNet : public Net {
 public:
  // Throws ModelFileError when `module` has no forward method or no parameters.
  explicit TorchScriptNet(torch::jit::Module module);

  // The module's forward on one tensor. Throws ModelFileError when it returns
  // anything but one tensor.
  torch::Tensor forward(torch::Tensor x) override;
  // Switches the module's own training flag too: its batch norm and dropout
  // read it.
  void train(bool on = true) override;

  // Whether LibTorch's graph executor optimises the module's code when it runs
  // on the CPU. Off by default: this LibTorch (Debian's, without LLVM) has no
  // fuser for the CPU, so what the optimising executor adds there is autograd
  // through differentiable subgraphs, which made training steps of ResNet-8
  // and ResNet18 10-25% slower than running the same code op by op under
  // eager autograd (bench/model_file_bench, docs/benchmarks.md). On CUDA the
  // executor is left at LibTorch's default, optimising: it fuses there.
  void set_optimize_on_cpu(bool on) { optimize_on_cpu_ = on; }
  bool optimize_on_cpu() const { return optimize_on_cpu_; }

  const torch::jit::Module& module() const { return module_; }

 private:
  torch::jit::Module module_;
  bool optimize_on_cpu_ = false;
};

// The names of the submodules (as in Python's named_modules(), "" for the top)
// whose code runs batch norm or dropout but never reads `self.training`: a
// module made by torch.jit.trace, where one mode's behaviour is baked in and
// train()/eval() change nothing.
std::vector<std::string> ModesBakedIn(const torch::jit::Module& module);

// ModelFile for a TorchScript archive.
std::unique_ptr<ModelFile> OpenTorchScriptFile(const std::string& path, std::string bytes);

}  // namespace elastic::models

#endif  // ELASTIC_MODELS_TORCHSCRIPT_H_
