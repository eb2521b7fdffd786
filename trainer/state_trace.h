// A record of training, step by step, for comparing two runs quantity by
// quantity (bench/float64_check.py compares ours with the PyTorch DDP peer).
//
// Each rank writes, into <dir>/rank<R>/, one file per optimizer step,
// step<N>.pt (N counts from 1), holding the rank's mean loss of the step, the
// learning rate, and after the update every parameter ("param/<name>"), buffer
// ("buffer/<name>") and optimizer state tensor ("<kind>/<name>", e.g.
// "momentum/conv1.weight"); and one file per evaluation, eval<E>.pt (E: the
// epoch evaluated, from 1), with the world's summed test loss, hits and count.
// The files are torch.save's format (torch::pickle_save): torch.load reads
// them as a dict of tensors. Each is written whole or not at all.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "trainer/learner.h"
#include "trainer/objective.h"

namespace elastic::trainer {

class StateTrace {
 public:
  // Creates <dir>/rank<rank>; throws naming the directory when it cannot.
  StateTrace(const std::string& dir, int rank);

  void AfterStep(int64_t step, const StepStats& stats, const Learner& learner);
  void AfterEvaluation(int64_t epoch, const EvalResult& world_result);

 private:
  std::filesystem::path dir_;
};

}  // namespace elastic::trainer
