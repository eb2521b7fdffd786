// What a fixed world's run did (fixed_world.h: one process, or one rank of an
// mpirun job), for whoever keeps a record of it: the program's main writes
// these as the job's event log (api/fixed_run_events.h, docs/events.md).
// Declared here, so that the loop and the fixed world tell it without
// knowing where it goes; nothing here depends on the elastic trainer.
#pragma once

#include <cstdint>
#include <string>

#include "trainer/progress.h"
#include "trainer/state_point.h"

namespace elastic::trainer {

class RunObserver {
 public:
  virtual ~RunObserver() = default;

  // Every rank of the run, with its own rank: the checksum of its
  // parameters once every rank holds rank 0's state (`at`, after the start's
  // sync: a fresh model or the checkpoint of --resume; `end` false), and
  // again when training is over (`at` the point trained to; `end` true).
  virtual void OnParams(int rank, int world, const StatePoint& at, uint64_t checksum, bool end) {}
  // Rank 0 only, from here on.
  virtual void OnEpochEnd(const EpochSummary& summary) {}
  virtual void OnEvaluation(const EvaluationSummary& summary) {}
  // A checkpoint of `at` was written to `path`.
  virtual void OnCheckpoint(const StatePoint& at, const std::string& path) {}
  // The last step is trained (after the final checkpoint); `metric` is the
  // last evaluation's.
  virtual void OnFinished(const StatePoint& at, double metric, bool early_stopped) {}
};

}  // namespace elastic::trainer
