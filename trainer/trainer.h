// A run in a fixed world: the training loop (training_loop.h) over one
// process, or one rank of an MPI job, from the flags.
//
// The world is a Communicator (one rank per process, e.g. MPI under mpirun) or
// nothing, which is the world of one: a single-process run is the one-rank case
// of the data-parallel one, not a separate loop. With W ranks every step trains
// on the next W x --batch-size samples of the permutation (rank r takes the r-th
// slice), the gradients are summed across ranks (each weighted by its share),
// the learning rate is --lr x W, and what is printed, evaluated and
// checkpointed is the job's, not one rank's. An elastic job's generations run
// the same loop in another World (trainer/elastic/worker/generation_world.h).
//
// Also here: what every run decides from the flags before its loop starts
// (arithmetic, the learner's configuration, the loop's), shared with the
// elastic worker.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "trainer/data/dataset.h"
#include "trainer/fixed_world.h"
#include "trainer/learner.h"
#include "trainer/objective.h"
#include "trainer/task.h"
#include "trainer/train_options.h"
#include "trainer/training_loop.h"

namespace elastic::trainer {

// What a run computes in on `device`: --precision and --memory-format
// resolved against this CPU (precision.h) and the model.
struct Arithmetic {
  Precision precision = Precision::kFloat32;
  bool channels_last = false;
  std::string Summary() const;  // "bf16, channels-last": the epoch lines' tail
  std::string why;              // how each was chosen: a run's first lines
};
Arithmetic ChooseArithmetic(const TrainOptions& options, const Task& task,
                            const torch::Device& device);

// ChooseArithmetic on the device a local worker would get, for the command
// line: throws FlagError where the flags ask for arithmetic this machine gets
// wrong (bf16 whose convolutions sum in bf16), before any worker starts. A
// --device that cannot be resolved is left for the run to report.
void CheckArithmetic(const TrainOptions& options);

// The Learner's configuration from the flags, for a world of `world_size`
// ranks (the learning rate scales with it unless `global_batch` is fixed).
LearnerOptions MakeLearnerOptions(const TrainOptions& options, const Task& task,
                                  const Arithmetic& arithmetic, int world_size = 1,
                                  int64_t global_batch = 0);
// A freshly seeded Learner of the task's model.
std::unique_ptr<Learner> MakeLearner(const TrainOptions& options, const Task& task,
                                     const Arithmetic& arithmetic, const torch::Device& device,
                                     int world_size = 1, int64_t global_batch = 0);
// The same over `model`, an earlier Learner's of this task, whose state the
// caller restores (a worker's next generation): the model keeps what LibTorch
// learned of it on its first runs (a TorchScript module's profiled and
// optimized graphs) instead of loading a new one and warming it up again.
std::unique_ptr<Learner> MakeLearnerOver(std::shared_ptr<models::Net> model,
                                         const TrainOptions& options, const Task& task,
                                         const Arithmetic& arithmetic, const torch::Device& device,
                                         int world_size, int64_t global_batch);

// The loop's configuration from the flags: a commit after every step (the
// progress line is then exact), no global batch.
LoopConfig MakeLoopConfig(const TrainOptions& options, const Task& task,
                          const Arithmetic& arithmetic);

// How the progress lines print the task's metric, its test loss (with
// perplexity for a language model) and its throughput (tokens/s for a task
// with tokens_per_sample, else images/s).
MetricLabel MetricLabelOf(const Task& task);

// The label of a language model whose samples are windows of `context`
// tokens (--dataset tokens), for a --controller-only driver, which builds no
// task.
MetricLabel LanguageModelLabel(int64_t context);

struct TrainResult {
  int64_t epochs_completed = 0;
  int64_t steps = 0;
  bool early_stopped = false;
  EvalResult last_eval;
  double train_images_per_second = 0;  // training steps only, evaluation excluded
};

class Trainer {
 public:
  // Trains `task` as one rank of `world` (null: a world of one; otherwise it
  // must outlive the Trainer). Only rank 0 writes the progress to `out` and
  // the checkpoints. Seeds LibTorch, builds the model and, with --resume,
  // restores the checkpoint that rank 0 reads (throws CheckpointError or
  // std::runtime_error when it is missing, corrupt or does not fit this run);
  // then every rank holds rank 0's state. `observer` (null: none; it must
  // outlive the Trainer) is told what the run does (run_observer.h).
  Trainer(const TrainOptions& options, Task task, std::FILE* out,
          collectives::Communicator* world = nullptr, RunObserver* observer = nullptr);
  // The zoo model of --model on the given splits (tests pass their own).
  Trainer(const TrainOptions& options, std::shared_ptr<const Dataset> train,
          std::shared_ptr<const Dataset> test, std::FILE* out,
          collectives::Communicator* world = nullptr);
  ~Trainer();

  // The zoo model on the splits named by --dataset / --data-dir.
  static std::unique_ptr<Trainer> FromOptions(const TrainOptions& options, std::FILE* out,
                                              collectives::Communicator* world = nullptr);

  // Every rank runs it; the result is the job's (the same on every rank).
  // Throws std::runtime_error when the ranks end with different parameters.
  TrainResult Run();

  Learner& learner() { return *learner_; }
  const Task& task() const { return task_; }
  const std::vector<std::string>& class_names() const { return task_.class_names; }

 private:
  // Rank 0's training state (the checkpoint with --resume) on every rank.
  void RestoreOrSync();

  TrainOptions options_;
  Task task_;
  std::unique_ptr<FixedWorld> world_;
  Arithmetic arithmetic_;
  std::unique_ptr<Learner> learner_;
  LoopState state_;
  std::unique_ptr<TrainingLoop> loop_;
};

}  // namespace elastic::trainer
