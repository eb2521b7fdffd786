// What a run did, kept for the end-of-run report: one record per epoch and the
// world-size timeline with the reason of every change. The trainer appends as
// it goes; the report reads a snapshot. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "monitoring/membership_reason.h"

namespace elastic::monitoring {

struct EpochRecord {
  int64_t epoch = 0;
  double train_loss = 0;
  double train_accuracy = 0;     // in [0, 1]
  double test_accuracy = 0;      // in [0, 1]; NaN when the epoch was not evaluated
  double images_per_second = 0;  // samples per second
  double tokens_per_second = 0;  // a language model's; 0 for other tasks
  double learning_rate = 0;
  int64_t world_size = 0;
  // Seconds since the run started, at the end of the epoch. RecordEpoch fills
  // it in when left negative.
  double seconds = -1;
};

struct WorldSizeChange {
  double seconds = 0;  // since the run started
  int64_t world_size = 0;
  int64_t generation = 0;
  // Why it changed; empty for the first world of the run.
  std::optional<MembershipChangeReason> reason;
};

// A new split of the step's samples, sized by the workers' speeds.
struct ShareChange {
  double seconds = 0;  // since the run started
  int64_t generation = 0;
  int64_t step_samples = 0;
  struct Worker {
    uint64_t member = 0;
    int64_t share = 0;
    double slowdown = 0;  // times slower than the median worker
  };
  std::vector<Worker> workers;  // in rank order
};

struct RunSeries {
  std::vector<EpochRecord> epochs;
  std::vector<WorldSizeChange> world;
  std::vector<ShareChange> shares;
  double duration_seconds = 0;  // when the snapshot was taken
};

class RunHistory {
 public:
  // The run's clock starts now.
  RunHistory();

  // Throws std::invalid_argument naming the field for an accuracy outside
  // [0, 1], a negative throughput, learning rate or world size.
  void RecordEpoch(EpochRecord record);
  // Stamped with the time since the run started.
  void RecordWorldSize(int64_t world_size, int64_t generation,
                       std::optional<MembershipChangeReason> reason);
  // With an explicit time (replaying a log, tests).
  void RecordWorldSizeAt(double seconds, int64_t world_size, int64_t generation,
                         std::optional<MembershipChangeReason> reason);

  double SecondsSinceStart() const;
  RunSeries Snapshot() const;

 private:
  const std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  RunSeries series_;
};

}  // namespace elastic::monitoring
