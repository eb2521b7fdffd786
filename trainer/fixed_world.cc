#include "trainer/fixed_world.h"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "trainer/shares.h"

namespace elastic::trainer {
namespace {

// The job's progress is rank 0's to print; the others print nothing.
std::FILE* OpenNullSink() {
  std::FILE* sink = std::fopen("/dev/null", "w");
  if (sink == nullptr) throw std::runtime_error("cannot open /dev/null");
  return sink;
}

}  // namespace

FixedWorld::FixedWorld(collectives::Communicator* comm, std::FILE* out, int64_t epochs,
                       int64_t log_every, MetricLabel metric, RunObserver* observer)
    : comm_(comm),
      rank_(comm != nullptr ? comm->rank() : 0),
      size_(comm != nullptr ? comm->size() : 1),
      quiet_(rank_ != 0 ? OpenNullSink() : nullptr),
      out_(rank_ != 0 ? quiet_ : out),
      observer_(observer != nullptr ? observer : &none_),
      epochs_(epochs),
      reporter_(out_, ProgressReporter::IsTerminal(out_), log_every, std::move(metric)) {}

FixedWorld::~FixedWorld() {
  if (quiet_ != nullptr) std::fclose(quiet_);
}

void FixedWorld::LogChecksum(const char* when, uint64_t checksum) const {
  if (comm_ == nullptr) return;
  std::fprintf(stderr, "rank %d of %d: parameters at %s: checksum=%016llx\n", rank_, size_, when,
               static_cast<unsigned long long>(checksum));
  std::fflush(stderr);
}

void FixedWorld::OnSynced(const StatePoint& at, uint64_t checksum) {
  at_ = at;
  LogChecksum("start", checksum);
  observer_->OnParams(rank_, size_, at, checksum, false);
}

void FixedWorld::OnRanksAgreeAtEnd(uint64_t checksum) {
  LogChecksum("end", checksum);
  observer_->OnParams(rank_, size_, at_, checksum, true);
}

void FixedWorld::OnEpochStart(int64_t epoch, int64_t steps_in_epoch) {
  reporter_.StartEpoch(epoch + 1, epochs_, steps_in_epoch);
}

void FixedWorld::OnProgress(const StepReport& r) {
  at_ = r.at;
  epoch_images_ = r.seen;
  epoch_seconds_ = reporter_.epoch_seconds() - epoch_eval_seconds_;
  reporter_.Step(r.step_in_epoch, r.at.step, static_cast<int64_t>(r.seen), r.loss, r.metric, r.lr);
}

void FixedWorld::OnCommit(const CommitReport& report) { at_ = report.at; }

void FixedWorld::OnEpochEnd(const EpochSummary& summary) {
  images_ += epoch_images_;
  seconds_ += epoch_seconds_;
  epoch_images_ = epoch_seconds_ = epoch_eval_seconds_ = 0;
  reporter_.EndEpoch(summary);
  observer_->OnEpochEnd(summary);
}

void FixedWorld::OnEvaluation(const EvaluationSummary& summary) {
  epoch_eval_seconds_ += summary.seconds;
  reporter_.Evaluated(summary);
  observer_->OnEvaluation(summary);
}

void FixedWorld::OnShares(const ShareReport& report) {
  if (!report.changed) return;
  std::vector<std::string> names;
  for (int r = 0; r < size_; ++r) names.push_back("rank " + std::to_string(r));
  reporter_.Note(
      DescribeShares(report.shares, report.slowdowns, report.step_samples, names).c_str());
}

double FixedWorld::train_images_per_second() const {
  const double seconds = seconds_ + epoch_seconds_;
  return seconds > 0 ? (images_ + epoch_images_) / seconds : 0;
}

void FixedWorld::OnCheckpoint(const StatePoint& at, const std::string& path) {
  observer_->OnCheckpoint(at, path);
}

void FixedWorld::OnFinished(const StatePoint& at, double metric, bool early_stopped) {
  if (early_stopped) {
    reporter_.Note("early stopping: test loss has not improved for --patience epochs");
  }
  observer_->OnFinished(at, metric, early_stopped);
}

}  // namespace elastic::trainer
