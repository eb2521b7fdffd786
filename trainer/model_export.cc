#include "trainer/model_export.h"

#include <torch/serialize.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "runtime/atomic_file.h"
#include "trainer/checkpoint.h"
#include "trainer/learner.h"

namespace elastic::trainer {

std::string StateDictBytes(const torch::nn::Module& model) {
  c10::Dict<std::string, torch::Tensor> dict;
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    dict.insert(name, t.detach().to(torch::kCPU).contiguous());
  };
  for (const auto& p : model.named_parameters()) add(p.key(), p.value());
  for (const auto& b : model.named_buffers()) add(b.key(), b.value());
  const std::vector<char> bytes = torch::pickle_save(dict);
  return std::string(bytes.begin(), bytes.end());
}

std::vector<std::string> WriteTrainedModel(const Task& task, std::string_view learner_state,
                                           const std::string& dir) {
  std::shared_ptr<models::Net> model = task.model();
  LoadModelFromState(learner_state, task.model_name, *model);
  std::filesystem::create_directories(dir);
  std::vector<std::string> paths;
  const std::string state_dict = (std::filesystem::path(dir) / kStateDictFile).string();
  runtime::WriteFileAtomically(state_dict, StateDictBytes(*model));
  paths.push_back(state_dict);
  if (task.model_file) {
    std::map<std::string, std::string> extra;
    if (!task.preprocessing.empty()) extra["preprocessing.json"] = task.preprocessing;
    std::ostringstream module;
    task.model_file->Save(*model, module, extra);
    const std::string path = (std::filesystem::path(dir) / task.model_file->saved_name()).string();
    runtime::WriteFileAtomically(path, module.str());
    paths.push_back(path);
  }
  return paths;
}

std::string TrainedModelNote(const std::string& checkpoint_dir, bool from_model_file) {
  if (checkpoint_dir.empty()) {
    return "note: the trained model was not saved (no --checkpoint-dir; with one, state_dict.pt " +
           std::string(from_model_file ? "and model.pt are" : "is") + " written for Python)";
  }
  const std::filesystem::path dir(checkpoint_dir);
  std::string note = "trained model: " + (dir / kStateDictFile).string() + " (torch.load)";
  if (from_model_file) note += ", " + (dir / "model.pt").string() + " (torch.jit.load)";
  return note;
}

std::string WriteCheckpointWithModel(const Task& task, std::string_view learner_state,
                                     const std::string& dir) {
  const std::string path = WriteCheckpointIn(dir, learner_state);
  WriteTrainedModel(task, learner_state, dir);
  return path;
}

}  // namespace elastic::trainer
