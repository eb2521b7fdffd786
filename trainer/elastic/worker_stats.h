// What a worker measures about itself for the driver's metrics: the wall time
// and payload of every allreduce it runs, and its own step time.
//
// Workers report through the head's key-value store, the channel they already
// share with the driver: each one puts a WorkerStatsRecord under
// JobKey::WorkerStats(member id). The record is cumulative since the worker
// started (allreduce counts per histogram bucket, their summed seconds and
// bytes), so the driver folds in the difference from the last record it read:
// a record read twice, or one overwritten before it was read, counts exactly
// once. A member id is never reused, so a worker that takes the rank of one
// that left starts from zero and the job's counters only grow.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/kv_store.h"

namespace elastic::trainer {

struct WorkerStatsRecord {
  // Where the last step ran: the rank is only meaningful in that generation.
  uint64_t generation = 0;
  int64_t rank = -1;  // -1 before the first step
  double step_seconds = 0;
  // Allreduces by duration bucket: one entry per bound of
  // monitoring::TrainingMetrics::AllreduceDurationBuckets() plus one for +Inf
  // (not cumulative across buckets).
  std::vector<uint64_t> allreduce_buckets;
  double allreduce_seconds = 0;  // sum over all of them
  uint64_t allreduce_bytes = 0;

  uint64_t allreduces() const;

  // One line of text: "v1 <generation> <rank> <step s> <sum s> <bytes> <n> <n counts>".
  std::string Encode() const;
  // Throws std::invalid_argument naming what is wrong with `text`.
  static WorkerStatsRecord Parse(const std::string& text);
};

// Accumulates one worker's measurements; thread-safe (allreduces may complete
// on any thread), cheap: a short critical section per call.
class WorkerStats {
 public:
  WorkerStats();

  void ObserveAllreduce(double seconds, uint64_t bytes);
  void ObserveStep(uint64_t generation, int64_t rank, double seconds);
  WorkerStatsRecord Snapshot() const;

 private:
  mutable std::mutex mutex_;
  WorkerStatsRecord record_;  // guarded by mutex_
};

// Puts a worker's record under its key in `store`: Publish at once,
// PublishIfDue at most once per `interval` (called at every commit point, which
// can be every step). Nothing before SetMemberId: no one could read it.
class WorkerStatsPublisher {
 public:
  explicit WorkerStatsPublisher(const WorkerStats& stats,
                                std::chrono::milliseconds interval = std::chrono::seconds(1));

  // The member id is known only once the worker registered.
  void SetMemberId(uint64_t member_id) { member_id_ = member_id; }
  void Publish(runtime::KeyValueStore& store);
  void PublishIfDue(runtime::KeyValueStore& store);

 private:
  const WorkerStats& stats_;
  const std::chrono::milliseconds interval_;
  uint64_t member_id_ = 0;
  std::optional<std::chrono::steady_clock::time_point> last_;
};

}  // namespace elastic::trainer
