// The single-process training loop: epochs of Learner::Step over the elastic
// sampler's permutation, evaluation after each epoch, checkpoints, early
// stopping and --resume. The distributed trainer keeps the same pieces
// (Learner, sampler, Evaluate, checkpoints) and swaps this loop for its own.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "trainer/data/dataset.h"
#include "trainer/data/loader.h"
#include "trainer/elastic/sampler.h"
#include "trainer/evaluate.h"
#include "trainer/learner.h"
#include "trainer/progress.h"
#include "trainer/train_options.h"

namespace elastic::trainer {

// The Learner's configuration from the flags.
LearnerOptions MakeLearnerOptions(const TrainOptions& options, int64_t num_classes);

struct TrainResult {
  int64_t epochs_completed = 0;
  int64_t steps = 0;
  bool early_stopped = false;
  EvalResult last_eval;
  double train_images_per_second = 0;  // training steps only, evaluation excluded
};

class Trainer {
 public:
  // Trains on the given splits (tests pass their own); `out` receives the
  // progress. Seeds LibTorch, builds the model and, with --resume, restores
  // the checkpoint (throws CheckpointError or std::runtime_error when it is
  // missing, corrupt or does not fit this run).
  Trainer(const TrainOptions& options, std::shared_ptr<const Dataset> train,
          std::shared_ptr<const Dataset> test, std::FILE* out);

  // Loads the splits named by --dataset / --data-dir.
  static std::unique_ptr<Trainer> FromOptions(const TrainOptions& options, std::FILE* out);

  TrainResult Run();

  Learner& learner() { return *learner_; }
  const std::vector<std::string>& class_names() const { return class_names_; }

 private:
  // One epoch (or what is left of it after a resume or before --max-steps).
  // Returns false when --max-steps cut it short.
  bool TrainEpoch(double* loss_sum, int64_t* correct, int64_t* seen);
  void WriteCheckpoint();

  TrainOptions options_;
  std::shared_ptr<const Dataset> train_;
  std::shared_ptr<const Dataset> test_;
  int64_t train_size_;
  std::vector<int64_t> test_indices_;
  std::vector<std::string> class_names_;
  std::unique_ptr<Learner> learner_;
  std::unique_ptr<ElasticSampler> sampler_;
  std::unique_ptr<Loader> train_loader_;
  std::unique_ptr<Loader> test_loader_;
  ProgressReporter reporter_;
};

}  // namespace elastic::trainer
