// Progress output of a training run. On a terminal one live line is redrawn
// in place (step, loss, accuracy, images/s or tokens/s, ETA); otherwise, for logs and
// pipes, a plain line every `log_every` steps. Each epoch ends with one
// summary line either way.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace elastic::trainer {

// "accuracy" below is the task's metric (objective.h): accuracy for a classifier.
struct EpochSummary {
  int64_t epoch = 0;  // 1-based for people
  int64_t epochs = 0;
  int world = 1;
  double train_loss = 0;
  double train_accuracy = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double images_per_second = 0;
  double seconds = 0;
  double lr = 0;
  std::string arithmetic;  // e.g. "bf16, channels-last" (trainer.h, Arithmetic)
};

// An evaluation inside an epoch, every --eval-every steps (training_loop.h).
struct EvaluationSummary {
  int64_t step = 0;           // optimizer steps in all when it was taken
  int64_t epoch = 0;          // 1-based: the epoch it fell in
  double epoch_fraction = 0;  // how far through that epoch, in [0, 1)
  int world = 1;
  double test_loss = 0;
  double test_accuracy = 0;
  double seconds = 0;  // the evaluation's own time
};

// How the task's metric, loss and throughput are printed: "acc 91.20%" or
// "mae 0.0312"; "2.7259" or "2.7259 perplexity 15.27"; "480 img/s" or
// "30720 tok/s".
struct MetricLabel {
  std::string name = "acc";
  bool percent = true;                 // a fraction shown as a percentage
  std::string long_name = "accuracy";  // in the final line: "test accuracy 91.20%"
  // A language model's loss is a mean cross-entropy per token: its
  // perplexity, exp(loss), is printed beside the test loss.
  bool perplexity = false;
  // Throughput is counted in units of `unit` ("img", "tok"): samples per
  // second times `units_per_sample`.
  std::string unit = "img";
  int64_t units_per_sample = 1;

  std::string Format(double value) const;      // "acc 91.20%"
  std::string FormatLong(double value) const;  // "accuracy 91.20%"
  std::string FormatTestLoss(double loss) const;
  double Rate(double samples_per_second) const { return samples_per_second * units_per_sample; }
  std::string FormatRate(double samples_per_second) const;  // "480 img/s"
};

// "eval step 250 (epoch 1, 19%) world 2 | test loss 1.8821 perplexity 6.57 acc 44.10% | 0.8s":
// one line, printed by whoever prints the epoch lines.
std::string FormatEvaluation(const EvaluationSummary& summary, const MetricLabel& metric);

class ProgressReporter {
 public:
  // live: redraw one line with '\r' (use IsTerminal(out)).
  ProgressReporter(std::FILE* out, bool live, int64_t log_every, MetricLabel metric = {});

  static bool IsTerminal(std::FILE* out);

  void StartEpoch(int64_t epoch, int64_t epochs, int64_t steps_in_epoch);
  // After each step: running means over the epoch so far.
  void Step(int64_t step_in_epoch, int64_t global_step, int64_t images_in_epoch, double mean_loss,
            double accuracy, double lr);
  void EndEpoch(const EpochSummary& summary);
  // An evaluation inside the epoch: its line (FormatEvaluation); the live
  // rate and ETA then count from the next step.
  void Evaluated(const EvaluationSummary& summary);
  // A free-form line (clears the live line first).
  void Note(const char* text);

  double epoch_seconds() const;

 private:
  void ClearLiveLine();

  std::FILE* out_;
  bool live_;
  int64_t log_every_;
  int64_t epoch_ = 0;
  int64_t epochs_ = 0;
  int64_t steps_in_epoch_ = 0;
  bool line_open_ = false;
  MetricLabel metric_;
  std::chrono::steady_clock::time_point start_;
  // The first step shown in this epoch: the rate and the ETA count from it,
  // since an epoch that starts from a commit mid-epoch (a restore, a join)
  // reports the images before it at once.
  bool first_seen_ = false;
  std::chrono::steady_clock::time_point first_time_;
  int64_t first_step_ = 0;
  int64_t first_images_ = 0;
};

}  // namespace elastic::trainer
