#include "trainer/elastic/protocol/worker_stats.h"

#include <algorithm>

#include "monitoring/training_metrics.h"

namespace elastic::trainer {
namespace {

const std::vector<double>& Bounds() {
  return monitoring::TrainingMetrics::AllreduceDurationBuckets();
}

}  // namespace

uint64_t WorkerStatsRecord::allreduces() const {
  uint64_t total = 0;
  for (uint64_t count : allreduce_buckets) total += count;
  return total;
}

void ToProto(uint64_t member_id, const WorkerStatsRecord& record, proto::WorkerStats::Builder out) {
  out.setMemberId(member_id);
  out.setGeneration(record.generation);
  out.setRank(record.rank);
  out.setStepSeconds(record.step_seconds);
  capnp::List<uint64_t>::Builder buckets =
      out.initAllreduceBuckets(static_cast<unsigned int>(record.allreduce_buckets.size()));
  for (size_t i = 0; i < record.allreduce_buckets.size(); ++i)
    buckets.set(static_cast<unsigned int>(i), record.allreduce_buckets[i]);
  out.setAllreduceSeconds(record.allreduce_seconds);
  out.setAllreduceBytes(record.allreduce_bytes);
}

WorkerStatsRecord FromProto(proto::WorkerStats::Reader in) {
  WorkerStatsRecord record;
  record.generation = in.getGeneration();
  record.rank = in.getRank();
  record.step_seconds = in.getStepSeconds();
  for (uint64_t count : in.getAllreduceBuckets()) record.allreduce_buckets.push_back(count);
  record.allreduce_seconds = in.getAllreduceSeconds();
  record.allreduce_bytes = in.getAllreduceBytes();
  return record;
}

WorkerStats::WorkerStats() { record_.allreduce_buckets.assign(Bounds().size() + 1, 0); }

void WorkerStats::ObserveAllreduce(double seconds, uint64_t bytes) {
  // The first bucket whose bound is >= seconds (Prometheus buckets are "le").
  const std::vector<double>& bounds = Bounds();
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), seconds) - bounds.begin());
  std::lock_guard<std::mutex> lock(mutex_);
  ++record_.allreduce_buckets[bucket];
  record_.allreduce_seconds += seconds;
  record_.allreduce_bytes += bytes;
}

void WorkerStats::ObserveStep(uint64_t generation, int64_t rank, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  record_.generation = generation;
  record_.rank = rank;
  record_.step_seconds = seconds;
}

WorkerStatsRecord WorkerStats::Snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return record_;
}

WorkerStatsPublisher::WorkerStatsPublisher(const WorkerStats& stats,
                                           std::chrono::milliseconds interval)
    : stats_(stats), interval_(interval) {}

void WorkerStatsPublisher::Publish(const Sink& send) {
  if (member_id_ == 0) return;
  last_ = std::chrono::steady_clock::now();
  send(stats_.Snapshot());
}

void WorkerStatsPublisher::PublishIfDue(const Sink& send) {
  if (last_ && std::chrono::steady_clock::now() - *last_ < interval_) return;
  Publish(send);
}

}  // namespace elastic::trainer
