// The training loop: the one loop of every run, whatever is trained (a Task)
// and wherever (a World). A single process, an MPI job and every generation
// of an elastic job all run it.
//
//   Sync:  every rank takes the root's state (the sealed commit), restores it,
//          and the ranks' parameter checksums must agree.
//   Run:   epochs of steps over the elastic sampler's permutation, from the
//          learner's (epoch, position): each step's samples are split over the
//          world (epoch_plan.h), trained in micro-batches and their gradients
//          summed (accumulation.h); every --eval-every steps the test set is
//          evaluated; a commit every --commit-every steps sums
//          the ranks' loss and metric, keeps the state (if the world keeps
//          commits) and lets rank 0 stop the world there; after each epoch the
//          test set is evaluated in shards, the epoch ended (schedule, early
//          stopping), committed, and checkpointed when due.
//
// What lives longer than one world (an elastic worker's commit, which it
// restores after a fault) is in LoopState, owned by the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/commit_state.h"
#include "trainer/data/loader.h"
#include "trainer/epoch_plan.h"
#include "trainer/learner.h"
#include "trainer/objective.h"
#include "trainer/precision.h"
#include "trainer/sampler.h"
#include "trainer/shares.h"
#include "trainer/state_trace.h"
#include "trainer/task.h"
#include "trainer/world.h"

namespace elastic::trainer {

class SummingGradientHook;

struct LoopConfig {
  TrainingLimits limits;       // train_size, epochs, --max-steps, commits, checkpoints
  int64_t batch_size = 128;    // --batch-size: per rank, the most one micro-batch holds
  int64_t global_batch = 0;    // samples a step; 0: batch_size x world
  int64_t test_size = 0;       // test samples evaluated (--test-samples)
  int64_t recompute_bn = 0;    // --recompute-bn: training samples; 0: running averages
  bool augment = true;         // --augment
  int64_t loader_threads = 2;  // --loader-threads
  Precision precision = Precision::kFloat32;
  bool channels_last = false;
  std::string arithmetic;      // "bf16, channels-last": the epoch lines' tail
  std::string checkpoint_dir;  // empty: no checkpoints
  std::string trace_dir;       // --trace-dir (state_trace.h); empty: no trace
  // --balance: each rank's share of a step sized by its speed, re-planned at
  // commits (shares.h); false: the even split.
  bool balance = true;
  ShareRule share_rule;
  // Letting a worker too slow to be worth keeping go (an elastic world's
  // --let-go-below; below 0: never, as a fixed world cannot shrink).
  LetGoRule let_go{0.0, 3};
};

// What outlives one world.
struct LoopState {
  Commit commit;              // the last commit: the epoch's sums and the state
  bool holds_commit = false;  // commit.learner is the job's state (not only a fresh model)
  StatePoint committed;       // where commit stands, once holds_commit
  bool stopped_early = false;
  double last_metric = 0;  // of the last evaluation
};

class TrainingLoop {
 public:
  // All must outlive the loop.
  TrainingLoop(const Task& task, const LoopConfig& config, Learner& learner, LoopState& state,
               World& world);
  ~TrainingLoop();

  // Every rank restores `root`'s state.commit. `root_has_state` is the root's
  // to say: false (it could not read its source) fails every rank with a
  // std::runtime_error instead of leaving them waiting. A state over the
  // learner's StateSizeLimit is refused before it is allocated.
  void Sync(int root, bool root_has_state = true);

  enum class End {
    kFinished,  // nothing left to train (rank 0 wrote the final checkpoint)
    kStopped,   // a commit stopped the world (a membership change)
  };
  // Trains until one of those; a CollectiveError of the world comes out of it.
  End Run();

  const EvalResult& last_eval() const { return last_eval_; }

 private:
  struct EpochRun;
  enum class Boundary { kNextEpoch, kStop, kFinish };

  bool Finished() const;
  StatePoint Point() const;
  EpochRun StartEpochRun(const StepShape& shape);
  // Starts the run's loader on this rank's samples from the current position.
  void StartLoader(EpochRun& run, const StepShape& shape);
  StepStats TrainStep(EpochRun& run, const StepShape& shape, const std::vector<int64_t>& indices);
  std::vector<MicroBatch> LoadStep(EpochRun& run, const std::vector<int64_t>& indices,
                                   int64_t step_total);
  bool CommitPoint(CommitAt at);
  // Plans the shares from every rank's pace (`gathered`: three values a rank,
  // as CommitPoint summed them); a new split is used from the next step. A
  // rank too slow to keep is told to go (World::OnLetGo).
  void ReplanShares(const double* gathered);
  // Rank 0: tells the world the plan (World::OnShares).
  void ReportShares(const std::vector<RankPace>& paces, bool changed);
  // Tells the world of a rank too slow to keep (shares.h, RankToLetGo).
  void LetGoIfTooSlow(const std::vector<RankPace>& paces, double allreduce_seconds);
  void ReportProgress(const EpochRun& run, const StepShape& shape, double lr, bool first);
  Boundary EpochBoundary(const StepShape& shape);
  // --eval-every: evaluates inside the epoch, changing nothing that training uses.
  void EvaluateInsideEpoch(const StepShape& shape);
  EvalResult EvaluateShard();
  void RecomputeBatchNorm();
  // Evaluation's and the batch-norm re-estimate's: no augmentation, batches
  // of --batch-size.
  LoaderOptions UnaugmentedLoaderOptions() const;
  void FinishTraining();
  void WriteCheckpoint(const std::string& learner_bytes, const StatePoint& at);
  // The ranks' parameter checksums agree (throws naming the first that differs).
  uint64_t CheckRanksAgree(const char* when);

  const Task& task_;
  const LoopConfig config_;
  Learner& learner_;
  LoopState& state_;
  World& world_;
  ElasticSampler sampler_;
  // One-sample batches for a rank with no share of a step (made when first needed).
  std::unique_ptr<Loader> filler_;
  std::unique_ptr<SummingGradientHook> hook_;
  std::unique_ptr<StateTrace> trace_;  // --trace-dir
  // Sums of the steps since the last commit point.
  struct Pending {
    double loss = 0, metric = 0, seen = 0, seconds = 0;  // this rank's
    double step_samples = 0;                             // all ranks' samples
  };
  Pending pending_;
  // How this world's steps are split; the shares change at commits.
  StepShape shape_;
  // This rank's pace since the shares were last planned.
  struct Pace {
    double samples = 0, busy_seconds = 0, waited_seconds = 0;
    int64_t steps = 0;
  };
  std::vector<int> slow_streak_;  // RankToLetGo's, for this world
  // The last window's plan, when it moved the shares and was not yet
  // confirmed (PlanConfirmed); empty otherwise.
  std::vector<int64_t> unconfirmed_plan_;
  Pace pace_;
  bool shares_changed_ = false;  // since the run's loader started
  EvalResult last_eval_;
};

// Rank `root`'s bytes on every rank of `comm`; the root passes null when it has
// none (it failed), and every other rank then throws. Every rank refuses a
// size over `limit` rather than allocating it.
std::string BroadcastBytes(collectives::Communicator& comm, int root, const std::string* bytes,
                           uint64_t limit);

}  // namespace elastic::trainer
