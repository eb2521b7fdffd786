#include "trainer/elastic/controller/job_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace elastic::trainer {

JobMetrics::JobMetrics(const monitoring::MetricsOptions& options, bool port_is_default) {
  try {
    exposer_ = std::make_unique<monitoring::MetricsExposer>(options);
    exposer_->Serve(metrics_.registry());
  } catch (const monitoring::MetricsError& e) {
    if (!port_is_default) throw;
    // Training matters more than its dashboard: go on without the endpoint.
    std::fprintf(stderr, "driver: warning: no metrics endpoint (%s); choose --metrics-port\n",
                 e.what());
  }
}

std::string JobMetrics::url() const { return exposer_ ? exposer_->url() : ""; }

void JobMetrics::SetRate(double samples_per_second) {
  metrics_.SetImagesPerSecond(samples_per_second);
  if (tokens_per_sample_ > 0)
    metrics_.SetTokensPerSecond(samples_per_second * static_cast<double>(tokens_per_sample_));
}

void JobMetrics::OnGeneration(int64_t generation, int64_t world) {
  metrics_.SetGeneration(generation);
  metrics_.SetWorldSize(world);
  metrics_.RetainRanks(world);
  generation_ = generation;
  world_ = world;
}

void JobMetrics::OnRescale(double seconds) {
  if (seconds >= 0) metrics_.ObserveRescaleDuration(seconds);
}

void JobMetrics::OnProgress(const ProgressReport& p) {
  const auto now = std::chrono::steady_clock::now();
  metrics_.SetEpoch(p.epoch);
  metrics_.SetStep(p.step);
  if (std::isfinite(p.loss)) metrics_.SetTrainLoss(p.loss);
  if (p.accuracy >= 0 && p.accuracy <= 1) metrics_.SetTrainAccuracy(p.accuracy);
  if (p.lr >= 0) metrics_.SetLearningRate(p.lr);
  // Samples since the last report of the same epoch and generation; a restore
  // rewinds `seen`, and then nothing new was trained yet.
  if (last_progress_ && last_progress_->epoch == p.epoch &&
      last_progress_->generation == p.generation && p.seen > last_progress_->seen) {
    const double samples = p.seen - last_progress_->seen;
    metrics_.AddSamplesProcessed(static_cast<uint64_t>(samples));
    const double seconds = std::chrono::duration<double>(now - last_progress_time_).count();
    if (seconds > 0) SetRate(samples / seconds);
  }
  last_progress_ = p;
  last_progress_time_ = now;
}

void JobMetrics::OnShares(const std::vector<int64_t>& shares, const std::vector<double>& speeds) {
  for (size_t r = 0; r < shares.size() && r < speeds.size(); ++r)
    metrics_.SetRankShare(static_cast<int64_t>(r), shares[r], speeds[r]);
}

void JobMetrics::OnEvaluation(double test_loss, double test_accuracy) {
  metrics_.SetTestAccuracy(test_accuracy);
  metrics_.SetTestLoss(test_loss);
}

void JobMetrics::OnEpoch(const EpochReport& e) {
  metrics_.SetTestAccuracy(e.test_accuracy);
  metrics_.SetTestLoss(e.test_loss);
  SetRate(e.images_per_second);
}

void JobMetrics::AwaitFinalScrape() {
  if (exposer_) exposer_->AwaitNextScrape(std::chrono::seconds(60));
}

void JobMetrics::OnWorkerStats(uint64_t member_id, const WorkerStatsRecord& record) {
  auto refuse = [member_id](const std::string& why) {
    return std::invalid_argument("worker stats of member " + std::to_string(member_id) + ": " +
                                 why);
  };
  // A worker built with other buckets than this driver's histogram cannot be
  // folded in without misplacing its counts.
  const size_t buckets = monitoring::TrainingMetrics::AllreduceDurationBuckets().size() + 1;
  if (record.allreduce_buckets.size() != buckets) {
    throw refuse(std::to_string(record.allreduce_buckets.size()) +
                 " allreduce buckets, the driver has " + std::to_string(buckets));
  }
  if (record.rank < -1) throw refuse("negative rank");
  if (!(record.step_seconds >= 0) || std::isinf(record.step_seconds))
    throw refuse("step time is not a finite number >= 0");
  if (!(record.allreduce_seconds >= 0) || std::isinf(record.allreduce_seconds))
    throw refuse("allreduce seconds are not a finite number >= 0");

  WorkerStatsRecord& last = workers_[member_id];
  if (last.allreduce_buckets.empty())
    last.allreduce_buckets.assign(record.allreduce_buckets.size(), 0);
  // Counts are cumulative: a smaller one is not this member's (or is corrupt).
  std::vector<uint64_t> more(record.allreduce_buckets.size());
  for (size_t i = 0; i < more.size(); ++i) {
    if (record.allreduce_buckets[i] < last.allreduce_buckets[i])
      throw refuse("allreduce counts went back");
    more[i] = record.allreduce_buckets[i] - last.allreduce_buckets[i];
  }
  if (record.allreduce_seconds < last.allreduce_seconds ||
      record.allreduce_bytes < last.allreduce_bytes) {
    throw refuse("allreduce seconds or bytes went back");
  }
  if (record.allreduces() > last.allreduces() || record.allreduce_bytes > last.allreduce_bytes) {
    metrics_.AddAllreduces(more, record.allreduce_seconds - last.allreduce_seconds,
                           record.allreduce_bytes - last.allreduce_bytes);
  }
  if (record.rank >= 0 && record.rank < world_ &&
      record.generation == static_cast<uint64_t>(generation_)) {
    metrics_.SetRankStepTime(record.rank, record.step_seconds);
  }
  last = record;
}

void JobMetrics::OnRuntimeStats(uint64_t messages, uint64_t heartbeats_missed) {
  // The head's counters only grow while it lives, and it lives as long as we do.
  if (messages > runtime_messages_) metrics_.AddRuntimeMessages(messages - runtime_messages_);
  if (heartbeats_missed > heartbeats_missed_)
    metrics_.AddHeartbeatMisses(heartbeats_missed - heartbeats_missed_);
  runtime_messages_ = std::max(runtime_messages_, messages);
  heartbeats_missed_ = std::max(heartbeats_missed_, heartbeats_missed);
}

}  // namespace elastic::trainer
