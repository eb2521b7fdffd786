// The training step and the training state, as one unit.
//
// A Learner owns a model and everything that changes while it trains: the
// optimizer (and its momentum / Adam moments / Lookahead weights), the
// learning-rate schedule, early stopping, the loss scaler, the RNG and the
// progress counters. Step() is the whole per-step work; CaptureState() and
// RestoreState() turn all of that into bytes and back, exactly. The
// single-process loop (trainer.h) and the distributed trainer both drive it:
// the latter passes a GradientHook that allreduces the gradients, commits
// CaptureState() in memory and broadcasts it to new workers.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/net.h"
#include "trainer/amp.h"
#include "trainer/objective.h"
#include "trainer/optimizer.h"
#include "trainer/schedule.h"

namespace elastic::trainer {

struct LearnerOptions {
  std::string model_name;    // recorded in the state; a restore into another model fails
  int64_t num_classes = 10;  // recorded in the state too (0 for a model that is no classifier)
  // The loss and metric (objective.h); null: Classification(num_classes, label_smoothing).
  std::shared_ptr<const Objective> objective;
  OptimizerOptions optimizer;
  ScheduleOptions schedule;
  int64_t patience = 0;        // early stopping; 0: off
  double label_smoothing = 0;  // of the default objective
  double clip_grad = 0;        // max global L2 norm; 0: off
  // Autocast's precision (precision.h); master weights, gradients and the
  // state stay float32.
  Precision precision = Precision::kFloat32;
  // Convolution weights and inputs in channels-last memory (NHWC).
  bool channels_last = false;
  uint64_t seed = 0;
};

// Where training is: the epoch being trained (0-based), how many samples of
// its permutation are consumed, and how many optimizer steps were taken in
// all. The loop advances it; the Learner only keeps it with the state.
struct TrainingProgress {
  int64_t epoch = 0;
  int64_t position = 0;
  int64_t step = 0;
};

// Called around backward: the distributed trainer reduces the gradients across
// workers here, so that every worker then clips and steps on identical ones.
class GradientHook {
 public:
  virtual ~GradientHook() = default;
  // Before each micro-batch's backward; `last` for the step's final one (where
  // a reducer that overlaps communication with backward starts sending).
  virtual void BeforeBackward(bool last) {}
  // After the last backward, with the step's gradients in the parameters' .grad().
  virtual void AfterBackward(const std::vector<torch::Tensor>& params) = 0;
};

// Part of one optimizer step's batch (gradient accumulation). Its mean loss
// counts `weight` times in the step's loss: with weights n_i / N for the N
// samples of the step, the accumulated gradient is that of one batch of N.
struct MicroBatch {
  torch::Tensor inputs;
  torch::Tensor targets;
  double weight = 1;
};

struct StepStats {
  double loss_sum = 0;    // summed over the batch (mean loss x batch size)
  double metric_sum = 0;  // the objective's metric, summed over the batch
  int64_t count = 0;
  double lr = 0;
  bool skipped = false;  // the loss scaler found inf/NaN gradients; no update was made
};

// The model's parameters, each once: a parameter shared by two modules (a
// language model's tied embedding and output weights) is listed by LibTorch
// under both names, and would be stepped and allreduced twice.
std::vector<torch::Tensor> UniqueParameters(torch::nn::Module& model);

// Lays out every 4-d parameter and buffer of `model` in channels-last memory.
void ToChannelsLast(torch::nn::Module& model);

class Learner {
 public:
  // Moves the model to `device` (and its 4-d weights to channels-last memory
  // when asked). Throws when `options.precision` is not supported there.
  Learner(std::shared_ptr<models::Net> model, LearnerOptions options, torch::Device device);

  // One optimizer step on a batch: learning rate from the schedule at
  // `epochs_done` (the fractional epoch this step ends at), forward (under
  // autocast to the precision), the objective's loss, backward, `hook`,
  // loss-scale check, gradient clipping, optimizer step.
  StepStats Step(const torch::Tensor& inputs, const torch::Tensor& targets, double epochs_done,
                 GradientHook* hook = nullptr);
  // The same with gradients accumulated over micro-batches (at least one):
  // forward and backward of each in turn, then `hook`, then one optimizer step.
  // Only one micro-batch's activations are alive at a time.
  StepStats Step(const std::vector<MicroBatch>& micro_batches, double epochs_done,
                 GradientHook* hook = nullptr);

  // Forward and backward of one batch, no step: a new process's first passes
  // pay LibTorch's one-time costs (TorchScript profiles the first run and
  // optimizes its graph on the second; the allocator takes its first pages), so
  // a joiner that makes them before it joins does not keep the others waiting
  // in its first step. Leaves no gradients and the parameters as they were;
  // batch-norm statistics and the RNG move, so call it only where the state is
  // restored before training (a worker before it registers).
  void WarmUp(const torch::Tensor& inputs, const torch::Tensor& targets, int passes = 2);

  // After each epoch's evaluation: feeds the plateau schedule and early
  // stopping. Returns true when early stopping says to stop.
  bool EndEpoch(double validation_loss);
  bool should_stop() const { return stopper_.should_stop(); }

  // Every bit of the training state (see the file comment).
  std::string CaptureState() const;
  // The most bytes a state of this learner's model can take, to bound what a
  // rank allocates from a size a peer announced: four times this learner's own
  // state (a fresh one has no optimizer moments yet; Adam keeps two per
  // parameter) plus 64 MiB for everything else.
  uint64_t StateSizeLimit() const;
  // Throws std::runtime_error naming what does not fit (another model, number
  // of classes, optimizer or schedule; truncated bytes) and then leaves this
  // Learner in an unspecified state: build a fresh one to try again.
  void RestoreState(std::string_view bytes);

  models::Net& model() { return *model_; }
  const std::shared_ptr<models::Net>& shared_model() const { return model_; }
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  TrainingProgress& progress() { return progress_; }
  const TrainingProgress& progress() const { return progress_; }
  uint64_t seed() const { return options_.seed; }
  const LearnerOptions& options() const { return options_; }
  const torch::Device& device() const { return device_; }
  const LrSchedule& schedule() const { return schedule_; }
  const Objective& objective() const { return *objective_; }
  const Optimizer& optimizer() const { return *optimizer_; }

 private:
  // The model's output for one micro-batch, in training mode and under autocast.
  torch::Tensor Forward(const torch::Tensor& inputs);

  std::shared_ptr<models::Net> model_;
  LearnerOptions options_;
  torch::Device device_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule schedule_;
  EarlyStopping stopper_;
  std::unique_ptr<DynamicLossScaler> scaler_;  // only for fp16
  std::shared_ptr<const Objective> objective_;
  TrainingProgress progress_;
};

// Loads only the weights (parameters and buffers) of a CaptureState() of
// `model_name` into `model`, which must have the same architecture: what a
// checkpoint's trained model is written back from. The model keeps its own
// floating-point type (an fp64 state's weights are rounded into a float32
// model). Throws like RestoreState.
void LoadModelFromState(std::string_view state, const std::string& model_name,
                        torch::nn::Module& model);

// Seeds LibTorch's default generators (weight initialisation, dropout).
void SeedTorch(uint64_t seed);

}  // namespace elastic::trainer
