// The training loop of a fixed world: epochs of Learner::Step over the elastic
// sampler's permutation, evaluation after each epoch, checkpoints, early
// stopping and --resume.
//
// The world is a Communicator (one rank per process, e.g. MPI under mpirun) or
// nothing, which is the world of one: a single-process run is the one-rank case
// of the data-parallel one, not a separate loop. With W ranks every step trains
// on the next W x --batch-size samples of the permutation (rank r takes the r-th
// slice), the gradients are averaged across ranks, the learning rate is
// --lr x W, and what is printed, evaluated and checkpointed is the job's, not
// one rank's. The elastic trainer (trainer/elastic), whose world changes,
// keeps the same pieces (Learner, sampler, Evaluate, checkpoints) in its own loop.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "trainer/data/dataset.h"
#include "trainer/data/loader.h"
#include "trainer/elastic/sampler.h"
#include "trainer/evaluate.h"
#include "trainer/learner.h"
#include "trainer/progress.h"
#include "trainer/train_options.h"

namespace elastic::collectives {
class GradientReducer;
}

namespace elastic::trainer {

// What a run computes in on `device`: --precision and --memory-format
// resolved against this CPU (precision.h) and the model (models/registry.h).
struct Arithmetic {
  Precision precision = Precision::kFloat32;
  bool channels_last = false;
  std::string Summary() const;  // "bf16, channels-last": the epoch lines' tail
  std::string why;              // how each was chosen: a run's first lines
};
Arithmetic ChooseArithmetic(const TrainOptions& options, const torch::Device& device);

// ChooseArithmetic on the device a local worker would get, for the command
// line: throws FlagError where the flags ask for arithmetic this machine gets
// wrong (bf16 whose convolutions sum in bf16), before any worker starts. A
// --device that cannot be resolved is left for the run to report.
void CheckArithmetic(const TrainOptions& options);

// The Learner's configuration from the flags.
LearnerOptions MakeLearnerOptions(const TrainOptions& options, int64_t num_classes,
                                  const Arithmetic& arithmetic);

struct TrainResult {
  int64_t epochs_completed = 0;
  int64_t steps = 0;
  bool early_stopped = false;
  EvalResult last_eval;
  double train_images_per_second = 0;  // training steps only, evaluation excluded
};

class Trainer {
 public:
  // Trains on the given splits (tests pass their own) as one rank of `world`
  // (null: a world of one; otherwise it must outlive the Trainer). Only rank 0
  // writes the progress to `out` and the checkpoints. Seeds LibTorch, builds
  // the model and, with --resume, restores the checkpoint that rank 0 reads
  // (throws CheckpointError or std::runtime_error when it is missing, corrupt
  // or does not fit this run); then every rank holds rank 0's state.
  Trainer(const TrainOptions& options, std::shared_ptr<const Dataset> train,
          std::shared_ptr<const Dataset> test, std::FILE* out,
          collectives::Communicator* world = nullptr);
  ~Trainer();

  // Loads the splits named by --dataset / --data-dir.
  static std::unique_ptr<Trainer> FromOptions(const TrainOptions& options, std::FILE* out,
                                              collectives::Communicator* world = nullptr);

  // Every rank runs it; the result is the job's (the same on every rank).
  // Throws std::runtime_error when the ranks end with different parameters.
  TrainResult Run();

  Learner& learner() { return *learner_; }
  const std::vector<std::string>& class_names() const { return class_names_; }

 private:
  // One epoch (or what is left of it after a resume or before --max-steps).
  // Returns false when --max-steps cut it short.
  bool TrainEpoch(double* loss_sum, int64_t* correct, int64_t* seen);
  // Rank 0's training state (the checkpoint with --resume) on every rank.
  void RestoreOrSync(std::FILE* out);
  // The test set's evaluation, each rank evaluating its shard with rank 0's model.
  EvalResult EvaluateAll();
  // Compares the ranks' parameter checksums; each rank logs its own to stderr.
  void CheckRanksAgree(const char* when);
  void WriteCheckpoint();

  TrainOptions options_;
  collectives::Communicator* world_;  // null: a world of one
  int rank_ = 0;
  int world_size_ = 1;
  std::FILE* quiet_ = nullptr;  // where the progress of ranks other than 0 goes
  std::shared_ptr<const Dataset> train_;
  std::shared_ptr<const Dataset> test_;
  int64_t train_size_;
  std::vector<int64_t> test_indices_;
  std::vector<std::string> class_names_;
  Arithmetic arithmetic_;
  std::unique_ptr<Learner> learner_;
  std::unique_ptr<ElasticSampler> sampler_;
  std::unique_ptr<Loader> train_loader_;
  std::unique_ptr<Loader> test_loader_;
  std::unique_ptr<Loader> filler_loader_;  // see TrainEpoch
  std::unique_ptr<collectives::GradientReducer> reducer_;
  std::unique_ptr<ProgressReporter> reporter_;
};

}  // namespace elastic::trainer
