// What the driver of an elastic job exports while it runs: the Prometheus
// endpoint (monitoring/) fed from the progress, epoch and membership news that
// rank 0 and the head give the driver. (The end-of-run report is drawn from
// the job's event log: run_events.h.)
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "monitoring/membership_reason.h"
#include "monitoring/metrics_exposer.h"
#include "monitoring/training_metrics.h"
#include "trainer/elastic/protocol/worker_stats.h"

namespace elastic::trainer {

// Rank 0's progress after a step (proto::Progress, filled in by the driver).
struct ProgressReport {
  uint64_t generation = 0;
  int64_t epoch = 0;  // 0-based
  int64_t step = 0;   // optimizer steps in all
  int64_t steps_in_epoch = 0;
  int64_t step_in_epoch = 0;
  double seen = 0;  // samples trained on in this epoch since its start
  double loss = 0;
  double accuracy = 0;  // in [0, 1]
  double lr = 0;
  int world = 0;
};

// Rank 0's summary of an epoch (proto::EpochSummary, filled in by the driver).
struct EpochReport {
  int64_t epoch = 0;  // 1-based, as printed
  int world = 0;
  double train_loss = 0, train_accuracy = 0;  // accuracy in [0, 1]
  double test_loss = 0, test_accuracy = 0;
  double images_per_second = 0;
  double seconds = 0;
};

class JobMetrics {
 public:
  // Serves the metrics on options' address and port. When that port is taken
  // and it was only the default, the job runs without an endpoint (a warning
  // says so); an explicitly chosen port that cannot be bound is an error.
  JobMetrics(const monitoring::MetricsOptions& options, bool port_is_default);

  // "" when no endpoint is served.
  std::string url() const;

  // A language model's tokens per sample: throughput is then exported in
  // tokens/s as well (elastic_train_tokens_per_second). 0: none.
  void SetTokensPerSample(int64_t tokens) { tokens_per_sample_ = tokens; }

  // A new view is in force. Membership changes (join, leave, failure) are
  // counted where they are known, through metrics().RecordMembershipChange.
  void OnGeneration(int64_t generation, int64_t world);
  void OnRescale(double seconds);
  void OnProgress(const ProgressReport& progress);
  void OnEpoch(const EpochReport& epoch);
  // A commit re-planned the shares of a step (proto::Shares): a share
  // (samples) and a speed (samples a second) a rank of the generation in force.
  void OnShares(const std::vector<int64_t>& shares, const std::vector<double>& speeds);
  // Rank 0's evaluation inside an epoch (proto::Evaluation, --eval-every).
  void OnEvaluation(double test_loss, double test_accuracy);
  // A worker's cumulative WorkerStatsRecord, as member `member_id` sent it
  // (proto::WorkerStats, see FromProto). Folds in what it counted since the
  // last record of that member (so the same record delivered twice counts
  // once), and sets its step time under its rank when the record is of the
  // generation in force (a rank of an older one may now be someone else's).
  // Throws std::invalid_argument, folding in nothing, for a record that cannot
  // be folded in (other allreduce buckets than this driver's histogram, a
  // negative or non-finite time, a rank below -1) or whose counts went back.
  void OnWorkerStats(uint64_t member_id, const WorkerStatsRecord& record);
  // The head's cumulative counters (runtime::HeadStats): folds in the growth.
  void OnRuntimeStats(uint64_t messages, uint64_t heartbeats_missed);

  // At the end of the job: lets a Prometheus that has been scraping the
  // endpoint collect the final values (last epoch, test accuracy) before the
  // driver exits; see MetricsExposer::AwaitNextScrape. No wait when nothing
  // scrapes, a minute at most.
  void AwaitFinalScrape();

  monitoring::TrainingMetrics& metrics() { return metrics_; }

 private:
  // Samples per second, and tokens per second for a language model.
  void SetRate(double samples_per_second);

  monitoring::TrainingMetrics metrics_;
  std::unique_ptr<monitoring::MetricsExposer> exposer_;
  int64_t tokens_per_sample_ = 0;
  int64_t world_ = 0;
  int64_t generation_ = 0;
  // The last record folded in, per member (member ids are never reused).
  std::map<uint64_t, WorkerStatsRecord> workers_;
  uint64_t runtime_messages_ = 0;
  uint64_t heartbeats_missed_ = 0;
  // For images/s and the samples counter between two progress reports.
  std::optional<ProgressReport> last_progress_;
  std::chrono::steady_clock::time_point last_progress_time_;
};

}  // namespace elastic::trainer
