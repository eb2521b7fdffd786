// Where a training loop runs: a World. One fixed group of ranks (a single
// process, or an MPI job: fixed_world.h) or one generation of an elastic job
// (trainer/elastic/worker/generation_world.h), which ends at a fault or a new view.
//
// The loop (training_loop.h) reduces and broadcasts through the world's
// communicators, asks it at each commit whether to stop, and tells it what
// happened: the world prints it, or sends it to the job's controller. It
// never learns which kind of world it has.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "trainer/commit_state.h"
#include "trainer/epoch_plan.h"
#include "trainer/progress.h"

namespace elastic::trainer {

// After a step: where the epoch stands, over every rank.
struct StepReport {
  StatePoint at;               // after the step
  int64_t steps_in_epoch = 0;  // of the whole epoch
  int64_t step_in_epoch = 0;   // steps of this epoch done
  bool first = false;          // the first step this world trained
  int64_t step_samples = 0;    // samples of a full step, all ranks
  double seen = 0;             // samples of the epoch trained on so far, all ranks
  double loss = 0;             // mean training loss over them
  double metric = 0;           // mean metric over them
  double lr = 0;
  int world = 1;
};

// At a commit point (every --commit-every steps and at epoch boundaries).
struct CommitReport {
  StatePoint at;
  bool stop = false;     // the world stops here, as rank 0 was asked
  bool state = false;    // `commit.learner` holds the state at `at`
  const Commit* commit;  // the epoch's sums so far and, with `state`, the state
};

// At a commit that planned how a step is split (shares.h): rank 0's.
struct ShareReport {
  StatePoint at;
  bool changed = false;  // the split is new from this commit on
  int64_t step_samples = 0;
  std::vector<int64_t> shares;    // a rank each, from now on
  std::vector<double> speeds;     // samples a second of each rank's own work
  std::vector<double> slowdowns;  // times slower than the median rank
};

class World {
 public:
  virtual ~World() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Control values, the state broadcast and evaluation sums (host memory);
  // null for a world of one.
  virtual collectives::Communicator* control() = 0;
  // Gradients and model buffers (NCCL on GPUs, else the control one); null
  // for a world of one.
  virtual collectives::Communicator* data() = 0;
  // Sealing the state broadcast (commit_state.h): the cluster token.
  virtual const std::string& token() const = 0;
  // Whether every commit keeps the state in memory: an elastic world goes on
  // from it after a fault; a fixed one would only pay for the copy.
  virtual bool keeps_commits() const = 0;

  // Rank 0 at a commit point: whether the world stops there (a membership
  // change the controller asked for). A fixed world never stops.
  virtual bool StopRequested(CommitAt at) { return false; }

  // What happened, in order. Every rank is told; most worlds act on rank 0's.
  // The ranks hold rank `root`'s state; `checksum` is its parameters', equal on all.
  virtual void OnSynced(const StatePoint& at, uint64_t checksum) = 0;
  // Training ended; every rank's parameters have this checksum.
  virtual void OnRanksAgreeAtEnd(uint64_t checksum) {}
  virtual void OnEpochStart(int64_t epoch, int64_t steps_in_epoch) {}
  // Around the learner's step (a watchdog, a sample log): `indices` are this rank's.
  virtual void BeforeStep(const StatePoint& at, const std::vector<int64_t>& indices) {}
  virtual void AfterStep(double seconds) {}
  virtual void OnProgress(const StepReport& report) {}
  virtual void OnCommit(const CommitReport& report) {}
  // Rank 0, after a commit that planned the shares (whether or not the split changed).
  virtual void OnShares(const ShareReport& report) {}
  // Every rank, at a plan that found rank `rank` too slow to be worth
  // keeping (shares.h, RankToLetGo); `why` says so. That rank leaves as a
  // graceful leave does. A fixed world is never told.
  virtual void OnLetGo(int rank, const std::string& why) {}
  // Rank 0, after each epoch's evaluation.
  virtual void OnEpochEnd(const EpochSummary& summary) {}
  // Rank 0, after an evaluation inside an epoch (--eval-every).
  virtual void OnEvaluation(const EvaluationSummary& summary) {}
  // Rank 0 wrote a checkpoint of `at`.
  virtual void OnCheckpoint(const StatePoint& at, const std::string& path) {}
  // Rank 0, once training is over (after the final checkpoint).
  virtual void OnFinished(const StatePoint& at, double metric, bool early_stopped) {}
};

}  // namespace elastic::trainer
