#include "trainer/progress.h"

#include <unistd.h>

#include <cmath>
#include <string>
#include <utility>

namespace elastic::trainer {

namespace {

std::string FormatMetric(const std::string& name, bool percent, double value) {
  char text[96];
  if (percent) {
    std::snprintf(text, sizeof(text), "%s %.2f%%", name.c_str(), 100 * value);
  } else {
    std::snprintf(text, sizeof(text), "%s %.4g", name.c_str(), value);
  }
  return text;
}

}  // namespace

std::string MetricLabel::Format(double value) const { return FormatMetric(name, percent, value); }

std::string MetricLabel::FormatLong(double value) const {
  return FormatMetric(long_name, percent, value);
}

std::string MetricLabel::FormatTestLoss(double loss) const {
  char text[96];
  if (perplexity) {
    std::snprintf(text, sizeof(text), "%.4f perplexity %.4g", loss, std::exp(loss));
  } else {
    std::snprintf(text, sizeof(text), "%.4f", loss);
  }
  return text;
}

std::string MetricLabel::FormatRate(double samples_per_second) const {
  char text[64];
  std::snprintf(text, sizeof(text), "%.0f %s/s", Rate(samples_per_second), unit.c_str());
  return text;
}

ProgressReporter::ProgressReporter(std::FILE* out, bool live, int64_t log_every, MetricLabel metric)
    : out_(out),
      live_(live),
      log_every_(log_every < 1 ? 1 : log_every),
      metric_(std::move(metric)) {}

bool ProgressReporter::IsTerminal(std::FILE* out) { return ::isatty(::fileno(out)) == 1; }

void ProgressReporter::StartEpoch(int64_t epoch, int64_t epochs, int64_t steps_in_epoch) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_in_epoch_ = steps_in_epoch;
  start_ = std::chrono::steady_clock::now();
  first_seen_ = false;
}

double ProgressReporter::epoch_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressReporter::Step(int64_t step_in_epoch, int64_t global_step, int64_t images_in_epoch,
                            double mean_loss, double accuracy, double lr) {
  const auto now = std::chrono::steady_clock::now();
  if (!first_seen_) {
    first_seen_ = true;
    first_time_ = now;
    first_step_ = step_in_epoch;
    first_images_ = images_in_epoch;
  }
  const bool last = step_in_epoch == steps_in_epoch_;
  if (!live_ && step_in_epoch % log_every_ != 0 && !last) return;
  const double seconds = std::chrono::duration<double>(now - first_time_).count();
  const int64_t steps = step_in_epoch - first_step_;
  // Below a millisecond the rate is noise.
  const double rate =
      seconds > 1e-3 ? static_cast<double>(images_in_epoch - first_images_) / seconds : 0;
  const double eta = steps > 0 ? seconds / static_cast<double>(steps) *
                                     static_cast<double>(steps_in_epoch_ - step_in_epoch)
                               : 0;
  // The elastic driver learns loss and accuracy at commit points: before the
  // epoch's first one there is nothing to show yet, which is not a zero.
  char measured[128];
  if (images_in_epoch > 0) {
    std::snprintf(measured, sizeof(measured), "loss %.4f %s lr", mean_loss,
                  metric_.Format(accuracy).c_str());
  } else {
    std::snprintf(measured, sizeof(measured), "loss - %s - lr", metric_.name.c_str());
  }
  std::fprintf(out_, "%sepoch %lld/%lld step %lld/%lld (global %lld) %s %.4g %s ETA %.0fs%s",
               live_ ? "\r\033[K" : "", static_cast<long long>(epoch_),
               static_cast<long long>(epochs_), static_cast<long long>(step_in_epoch),
               static_cast<long long>(steps_in_epoch_), static_cast<long long>(global_step),
               measured, lr, metric_.FormatRate(rate).c_str(), eta, live_ ? "" : "\n");
  line_open_ = live_;
  std::fflush(out_);
}

void ProgressReporter::ClearLiveLine() {
  if (line_open_) std::fputs("\r\033[K", out_);
  line_open_ = false;
}

void ProgressReporter::EndEpoch(const EpochSummary& s) {
  ClearLiveLine();
  std::fprintf(out_,
               "epoch %lld/%lld train loss %.4f %s | test loss %s %s | "
               "%s %.1fs lr %.4g%s%s\n",
               static_cast<long long>(s.epoch), static_cast<long long>(s.epochs), s.train_loss,
               metric_.Format(s.train_accuracy).c_str(),
               metric_.FormatTestLoss(s.test_loss).c_str(), metric_.Format(s.test_accuracy).c_str(),
               metric_.FormatRate(s.images_per_second).c_str(), s.seconds, s.lr,
               s.arithmetic.empty() ? "" : " | ", s.arithmetic.c_str());
  std::fflush(out_);
}

std::string FormatEvaluation(const EvaluationSummary& s, const MetricLabel& metric) {
  char line[384];
  std::snprintf(line, sizeof(line),
                "eval step %lld (epoch %lld, %.0f%%) world %d | test loss %s %s | %.1fs",
                static_cast<long long>(s.step), static_cast<long long>(s.epoch),
                100 * s.epoch_fraction, s.world, metric.FormatTestLoss(s.test_loss).c_str(),
                metric.Format(s.test_accuracy).c_str(), s.seconds);
  return line;
}

void ProgressReporter::Evaluated(const EvaluationSummary& summary) {
  Note(FormatEvaluation(summary, metric_).c_str());
  first_seen_ = false;  // the rate and the ETA count from the next step, not through evaluation
}

void ProgressReporter::Note(const char* text) {
  ClearLiveLine();
  std::fprintf(out_, "%s\n", text);
  std::fflush(out_);
}

}  // namespace elastic::trainer
