#include "trainer/elastic/worker_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "monitoring/training_metrics.h"
#include "trainer/elastic/job_keys.h"

namespace elastic::trainer {
namespace {

const std::vector<double>& Bounds() {
  return monitoring::TrainingMetrics::AllreduceDurationBuckets();
}

std::invalid_argument BadRecord(const std::string& text, const std::string& why) {
  return std::invalid_argument("worker stats record '" + text.substr(0, 80) + "': " + why);
}

}  // namespace

uint64_t WorkerStatsRecord::allreduces() const {
  uint64_t total = 0;
  for (uint64_t count : allreduce_buckets) total += count;
  return total;
}

std::string WorkerStatsRecord::Encode() const {
  char head[160];
  std::snprintf(head, sizeof(head), "v1 %llu %lld %.17g %.17g %llu %zu",
                static_cast<unsigned long long>(generation), static_cast<long long>(rank),
                step_seconds, allreduce_seconds, static_cast<unsigned long long>(allreduce_bytes),
                allreduce_buckets.size());
  std::string out = head;
  for (uint64_t count : allreduce_buckets) out += " " + std::to_string(count);
  return out;
}

WorkerStatsRecord WorkerStatsRecord::Parse(const std::string& text) {
  std::istringstream in(text);
  std::string version;
  WorkerStatsRecord r;
  size_t buckets = 0;
  if (!(in >> version) || version != "v1") throw BadRecord(text, "not a v1 record");
  if (!(in >> r.generation >> r.rank >> r.step_seconds >> r.allreduce_seconds >>
        r.allreduce_bytes >> buckets)) {
    throw BadRecord(text, "truncated or not numbers");
  }
  if (r.rank < -1) throw BadRecord(text, "negative rank");
  if (!(r.step_seconds >= 0) || std::isinf(r.step_seconds))
    throw BadRecord(text, "step time is not a finite number >= 0");
  if (!(r.allreduce_seconds >= 0) || std::isinf(r.allreduce_seconds))
    throw BadRecord(text, "allreduce seconds are not a finite number >= 0");
  // A worker built with other buckets than this driver's histogram cannot be
  // folded in without misplacing its counts.
  if (buckets != Bounds().size() + 1) {
    throw BadRecord(text, std::to_string(buckets) + " allreduce buckets, the driver has " +
                              std::to_string(Bounds().size() + 1));
  }
  r.allreduce_buckets.resize(buckets);
  for (uint64_t& count : r.allreduce_buckets) {
    if (!(in >> count)) throw BadRecord(text, "fewer bucket counts than announced");
  }
  std::string rest;
  if (in >> rest) throw BadRecord(text, "more values than announced");
  return r;
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

void WorkerStatsPublisher::Publish(runtime::KeyValueStore& store) {
  if (member_id_ == 0) return;
  last_ = std::chrono::steady_clock::now();
  store.Put(JobKey::WorkerStats(member_id_), stats_.Snapshot().Encode());
}

void WorkerStatsPublisher::PublishIfDue(runtime::KeyValueStore& store) {
  if (last_ && std::chrono::steady_clock::now() - *last_ < interval_) return;
  Publish(store);
}

}  // namespace elastic::trainer
