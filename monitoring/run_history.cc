#include "monitoring/run_history.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace elastic::monitoring {

namespace {

void Require(bool ok, const std::string& what, double value) {
  if (!ok) throw std::invalid_argument(what + ", got " + std::to_string(value));
}

}  // namespace

RunHistory::RunHistory() : start_(std::chrono::steady_clock::now()) {}

double RunHistory::SecondsSinceStart() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void RunHistory::RecordEpoch(EpochRecord record) {
  Require(record.train_accuracy >= 0 && record.train_accuracy <= 1,
          "epoch train accuracy must be in [0, 1]", record.train_accuracy);
  Require(
      std::isnan(record.test_accuracy) || (record.test_accuracy >= 0 && record.test_accuracy <= 1),
      "epoch test accuracy must be in [0, 1] or NaN (not evaluated)", record.test_accuracy);
  Require(record.images_per_second >= 0, "epoch images per second must be >= 0",
          record.images_per_second);
  Require(record.tokens_per_second >= 0, "epoch tokens per second must be >= 0",
          record.tokens_per_second);
  Require(record.learning_rate >= 0, "epoch learning rate must be >= 0", record.learning_rate);
  Require(record.world_size >= 0, "epoch world size must be >= 0",
          static_cast<double>(record.world_size));
  if (record.seconds < 0) record.seconds = SecondsSinceStart();
  std::lock_guard<std::mutex> lock(mutex_);
  series_.epochs.push_back(record);
}

void RunHistory::RecordWorldSize(int64_t world_size, int64_t generation,
                                 std::optional<MembershipChangeReason> reason) {
  RecordWorldSizeAt(SecondsSinceStart(), world_size, generation, reason);
}

void RunHistory::RecordWorldSizeAt(double seconds, int64_t world_size, int64_t generation,
                                   std::optional<MembershipChangeReason> reason) {
  Require(world_size >= 0, "world size must be >= 0", static_cast<double>(world_size));
  Require(seconds >= 0 && std::isfinite(seconds), "world size change time must be >= 0", seconds);
  std::lock_guard<std::mutex> lock(mutex_);
  series_.world.push_back({seconds, world_size, generation, reason});
}

RunSeries RunHistory::Snapshot() const {
  const double now = SecondsSinceStart();
  std::lock_guard<std::mutex> lock(mutex_);
  RunSeries copy = series_;
  copy.duration_seconds = now;
  // A replayed history may reach past the wall clock of this process.
  for (const EpochRecord& e : copy.epochs)
    copy.duration_seconds = std::max(copy.duration_seconds, e.seconds);
  for (const WorldSizeChange& w : copy.world) {
    copy.duration_seconds = std::max(copy.duration_seconds, w.seconds);
  }
  return copy;
}

}  // namespace elastic::monitoring
