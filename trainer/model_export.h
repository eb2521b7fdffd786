// The trained model back to Python: beside every checkpoint (and so at the
// end of a run) rank 0 writes the model's weights as files Python opens.
//
//   state_dict.pt  every model: torch.load(path) gives the state dict that
//                  load_state_dict() of the same architecture accepts (for the
//                  zoo, pytorch-cifar's definitions: the names are the same).
//   model.pt       a --model-file module: torch.jit.load(path) gives the
//                  trained module, in eval mode, on the CPU.
//
// Both are written atomically: a crash leaves the previous file whole.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "models/net.h"
#include "trainer/task.h"

namespace elastic::trainer {

inline constexpr char kStateDictFile[] = "state_dict.pt";

// The parameters and buffers of `model` by their dotted names, on the CPU and
// contiguous, in the pickle format of Python's torch.save.
std::string StateDictBytes(const torch::nn::Module& model);

// Writes the model files of `task` with the weights of `learner_state` (a
// Learner::CaptureState() of task.model_name) into `dir`; returns their paths.
std::vector<std::string> WriteTrainedModel(const Task& task, std::string_view learner_state,
                                           const std::string& dir);

// The line a run ends with about its trained model: where its files are (in
// `checkpoint_dir`; model.pt only for a --model-file module), or that none
// were written because there is no checkpoint directory.
std::string TrainedModelNote(const std::string& checkpoint_dir, bool from_model_file);

// Writes `learner_state` as the checkpoint of `dir` (checkpoint.h) and then
// the model files beside it. Returns the checkpoint's path.
std::string WriteCheckpointWithModel(const Task& task, std::string_view learner_state,
                                     const std::string& dir);

}  // namespace elastic::trainer
