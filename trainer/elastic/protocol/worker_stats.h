// What a worker measures about itself for the driver's metrics: the wall time
// and payload of every allreduce it runs, and its own step time.
//
// Workers send their WorkerStatsRecord to the job controller as a typed
// message (proto::WorkerStats in control.capnp, tell "stats"; ToProto and
// FromProto below convert), not through the key-value store. The record is
// cumulative since the worker started (allreduce counts per histogram bucket,
// their summed seconds and bytes), so the driver folds in the difference from
// the last record it got: a record delivered twice, or one that was never
// delivered, counts exactly once. A member id is never reused, so a worker
// that takes the rank of one that left starts from zero and the job's counters
// only grow.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "trainer/elastic/protocol/control.capnp.h"

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
};

// The record of member `member_id` as the message it sends, and back. The
// fields map one to one; FromProto checks nothing (JobMetrics::OnWorkerStats
// refuses a record it cannot fold in).
void ToProto(uint64_t member_id, const WorkerStatsRecord& record, proto::WorkerStats::Builder out);
WorkerStatsRecord FromProto(proto::WorkerStats::Reader in);

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

// Hands a worker's record to `send` (which sends it to the controller):
// Publish at once, PublishIfDue at most once per `interval` (called at every
// commit point, which can be every step). Nothing before SetMemberId: the
// controller could not tell whose record it is.
class WorkerStatsPublisher {
 public:
  using Sink = std::function<void(const WorkerStatsRecord&)>;

  explicit WorkerStatsPublisher(const WorkerStats& stats,
                                std::chrono::milliseconds interval = std::chrono::seconds(1));

  // The member id is known only once the worker registered.
  void SetMemberId(uint64_t member_id) { member_id_ = member_id; }
  uint64_t member_id() const { return member_id_; }  // 0 before SetMemberId
  void Publish(const Sink& send);
  void PublishIfDue(const Sink& send);

 private:
  const WorkerStats& stats_;
  const std::chrono::milliseconds interval_;
  uint64_t member_id_ = 0;
  std::optional<std::chrono::steady_clock::time_point> last_;
};

}  // namespace elastic::trainer
