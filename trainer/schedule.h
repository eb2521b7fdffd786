// Learning-rate schedules (with linear warm-up) and early stopping.
//
// Both are functions of training progress measured in epochs, a fraction
// (epoch + samples consumed / data set size), not of a step count: the
// distributed trainer changes the number of steps per epoch whenever the world
// changes size, and the schedule must not notice. The exceptions count
// optimizer steps: a warm-up floor (a large world on a small data set takes
// few steps an epoch, and a warm-up of a few steps is no warm-up: ResNet18 at
// 8 workers on 4,068 images diverged after the 20 steps of 5 epochs), and a
// cosine over a number of steps, as language models are trained (nanoGPT).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace elastic::trainer {

enum class ScheduleKind { kConstant, kCosine, kStep, kPlateau };

// "constant", "cosine", "step" or "plateau"; anything else throws.
ScheduleKind ParseScheduleKind(const std::string& name);

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::kCosine;
  double base_lr = 0.1;
  double min_lr = 0;
  double warmup_epochs = 0;
  int64_t warmup_steps = 0;  // warm-up lasts at least this many optimizer steps
  double total_epochs = 1;   // cosine reaches min_lr here
  // > 0: cosine counts optimizer steps instead, from warmup_steps to here
  // (nanoGPT's lr_decay_iters), then stays at min_lr.
  int64_t decay_steps = 0;
  double step_size = 30;  // step: epochs between decays
  double gamma = 0.1;     // step: decay factor
  int64_t plateau_patience = 5;
  double plateau_factor = 0.1;
};

class LrSchedule {
 public:
  explicit LrSchedule(ScheduleOptions options);

  // The rate for the `steps_done`-th optimizer step (counting from 1), which
  // ends at `epochs_done` (fractional epochs). During warm-up it is the
  // schedule's value times the smaller of epochs_done / warmup_epochs and
  // steps_done / warmup_steps (a length of 0 does not count).
  double LearningRate(double epochs_done, int64_t steps_done) const;

  // The warm-up's factor in [0, 1] for that step.
  double WarmupFactor(double epochs_done, int64_t steps_done) const;

  // Called once after each epoch with the validation loss; only the plateau
  // schedule uses it, like torch's ReduceLROnPlateau (mode min, relative
  // threshold 1e-4): more than `plateau_patience` epochs without improvement
  // multiply the rate by `plateau_factor`, never below min_lr.
  void EndEpoch(double validation_loss);

  // The plateau state, for checkpoints and elastic commits.
  std::string Save() const;
  void Load(std::string_view bytes);

  const ScheduleOptions& options() const { return options_; }

 private:
  double Decayed(double epochs_done, int64_t steps_done) const;

  ScheduleOptions options_;
  double best_ = 0;
  bool has_best_ = false;
  int64_t bad_epochs_ = 0;
  double plateau_scale_ = 1;
};

// Stops training when the validation loss has not improved (relative
// threshold 1e-4) for `patience` epochs in a row. Patience 0 never stops.
class EarlyStopping {
 public:
  explicit EarlyStopping(int64_t patience) : patience_(patience) {}

  // Records one epoch's loss; returns true when training should stop.
  bool Update(double validation_loss);
  bool should_stop() const { return patience_ > 0 && bad_epochs_ >= patience_; }
  int64_t bad_epochs() const { return bad_epochs_; }

  std::string Save() const;
  void Load(std::string_view bytes);

 private:
  int64_t patience_;
  double best_ = 0;
  bool has_best_ = false;
  int64_t bad_epochs_ = 0;
};

}  // namespace elastic::trainer
