#include "models/torchscript.h"

#include <caffe2/serialize/versions.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

namespace elastic::models {
namespace {

// Registers the tensors of `from` (not copies: the same tensors) and a mirror
// of each child under the child's name, so that named_parameters() and
// named_buffers() of `to` read like Python's state_dict() keys.
void Mirror(const torch::jit::Module& from, torch::nn::Module& to) {
  for (const auto& p : from.named_parameters(/*recurse=*/false)) {
    to.register_parameter(p.name, p.value, p.value.requires_grad());
  }
  for (const auto& b : from.named_buffers(/*recurse=*/false)) to.register_buffer(b.name, b.value);
  for (const auto& child : from.named_children()) {
    auto mirror = std::make_shared<torch::nn::Module>();
    Mirror(child.value, *mirror);
    to.register_module(child.name, mirror);
  }
}

bool IsModeDependent(torch::jit::NodeKind kind) {
  static const std::set<torch::jit::NodeKind> kKinds = {
      c10::Symbol::fromQualString("aten::batch_norm"),
      c10::Symbol::fromQualString("aten::instance_norm"),
      c10::Symbol::fromQualString("aten::dropout"),
      c10::Symbol::fromQualString("aten::dropout_"),
      c10::Symbol::fromQualString("aten::feature_dropout"),
      c10::Symbol::fromQualString("aten::alpha_dropout"),
  };
  return kKinds.count(kind) > 0;
}

// What a graph does with the training flag: whether it reads it, and whether
// it runs an operation whose behaviour depends on it.
struct ModeUse {
  bool reads_training = false;
  bool mode_dependent = false;
};

void Scan(const torch::jit::Block* block, ModeUse& use) {
  for (const torch::jit::Node* node : block->nodes()) {
    if (node->kind() == c10::prim::GetAttr && node->s(c10::attr::name) == "training") {
      use.reads_training = true;
    }
    if (IsModeDependent(node->kind())) use.mode_dependent = true;
    for (const torch::jit::Block* sub : node->blocks()) Scan(sub, use);
  }
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

std::string Kib(size_t bytes) { return std::to_string((bytes + 1023) / 1024) + " KiB"; }

class TorchScriptFile : public ModelFile {
 public:
  TorchScriptFile(std::string path, std::string bytes, std::vector<std::string> warnings)
      : path_(std::move(path)), bytes_(std::move(bytes)), warnings_(std::move(warnings)) {}

  const std::string& path() const override { return path_; }
  std::string format() const override { return "TorchScript"; }
  std::string saved_name() const override { return "model.pt"; }
  const std::vector<std::string>& warnings() const override { return warnings_; }

  std::shared_ptr<Net> Create() const override {
    std::istringstream in(bytes_);
    return std::make_shared<TorchScriptNet>(torch::jit::load(in, torch::kCPU));
  }

  void Save(const Net& trained, std::ostream& out,
            const std::map<std::string, std::string>& extra) const override {
    const auto* net = dynamic_cast<const TorchScriptNet*>(&trained);
    if (net == nullptr) {
      throw ModelFileError(path_ + ": the model to save is not a TorchScript module");
    }
    torch::jit::Module copy = net->module().clone();
    copy.to(torch::kCPU);
    copy.eval();
    torch::jit::ExtraFilesMap files(extra.begin(), extra.end());
    copy.save(out, files);
  }

 private:
  std::string path_;
  std::string bytes_;
  std::vector<std::string> warnings_;
};

// Why `bytes` of a zip archive that torch::jit::load refused is no module.
std::string WhyNotAModule(const std::string& bytes, const std::string& error) {
  if (error.find("maximum supported version") != std::string::npos) {
    return "it was written by a newer PyTorch than the LibTorch of this build (which reads "
           "file format versions up to " +
           std::to_string(caffe2::serialize::kMaxSupportedFileFormatVersion) +
           "); save it again with Debian's python3-torch 1.13, the version this build uses";
  }
  // torch.save of a state dict or of a whole nn.Module writes data.pkl but no code/.
  if (bytes.find("/code/") == std::string::npos && bytes.find("data.pkl") != std::string::npos) {
    return "it is a pickle from torch.save (a state dict or a Python module object), not a "
           "TorchScript module: save the model with torch.jit.script(model).save(PATH)";
  }
  return "it is not a TorchScript module LibTorch can load (" + error +
         "); save the model with torch.jit.script(model).save(PATH)";
}

}  // namespace

TorchScriptNet::TorchScriptNet(torch::jit::Module module) : module_(std::move(module)) {
  if (!module_.find_method("forward")) throw ModelFileError("the module has no forward method");
  if (module_.parameters().size() == 0) {
    throw ModelFileError("the module has no parameters: there is nothing to train");
  }
  Mirror(module_, *this);
  train(true);
}

torch::Tensor TorchScriptNet::forward(torch::Tensor x) {
  // The setting is thread-local and the guard restores it: nothing else that
  // runs TorchScript in this process is affected.
  std::optional<torch::jit::GraphOptimizerEnabledGuard> no_optimization;
  if (!optimize_on_cpu_ && x.is_cpu()) no_optimization.emplace(false);
  torch::jit::IValue out = module_.forward({std::move(x)});
  if (!out.isTensor()) {
    throw ModelFileError("the module's forward returned a " + out.tagKind() +
                         ", the trainer needs one tensor of outputs");
  }
  return out.toTensor();
}

void TorchScriptNet::train(bool on) {
  module_.train(on);
  torch::nn::Module::train(on);
}

std::vector<std::string> ModesBakedIn(const torch::jit::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_modules()) {
    ModeUse use;
    for (const torch::jit::Method& method : item.value.get_methods()) {
      Scan(method.graph()->block(), use);
    }
    if (use.mode_dependent && !use.reads_training) names.push_back(item.name);
  }
  return names;
}

std::unique_ptr<ModelFile> OpenTorchScriptFile(const std::string& path, std::string bytes) {
  const std::string what = "--model-file " + path;
  if (!StartsWith(bytes, "PK\x03\x04")) {
    throw ModelFileError(what + ": not a TorchScript file (not a zip archive; " +
                         Kib(bytes.size()) +
                         "); save the model with torch.jit.script(model).save(PATH)");
  }
  torch::jit::Module module;
  try {
    std::istringstream in(bytes);
    module = torch::jit::load(in, torch::kCPU);
  } catch (const c10::Error& e) {
    throw ModelFileError(what + ": " + WhyNotAModule(bytes, e.what_without_backtrace()));
  }
  try {
    TorchScriptNet check(module);
  } catch (const ModelFileError& e) {
    throw ModelFileError(what + ": " + e.what());
  }
  std::vector<std::string> warnings;
  const std::vector<std::string> baked = ModesBakedIn(module);
  if (!baked.empty()) {
    std::string list;
    for (size_t i = 0; i < baked.size() && i < 3; ++i) {
      list += (i ? ", " : "") + (baked[i].empty() ? std::string("the top module") : baked[i]);
    }
    if (baked.size() > 3) list += " and " + std::to_string(baked.size() - 3) + " more";
    warnings.push_back(
        what + ": " + list +
        " run batch norm or dropout without reading self.training, as a module made by "
        "torch.jit.trace does: the mode it was traced in is baked in and train()/eval() "
        "change nothing. Use torch.jit.script(model) instead.");
  }
  return std::make_unique<TorchScriptFile>(path, std::move(bytes), std::move(warnings));
}

}  // namespace elastic::models
