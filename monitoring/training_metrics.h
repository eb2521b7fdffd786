// Every metric an elastic training job exports, behind named methods the
// trainer calls. Names follow Prometheus conventions: prefix `elastic_`, base
// units (seconds, bytes, ratios in [0, 1]), `_total` on counters; docs/metrics.md
// lists them. All methods are thread-safe.
//
//   TrainingMetrics metrics;
//   MetricsExposer exposer(options);      // --metrics-address/--metrics-port
//   exposer.Serve(metrics.registry());
//   metrics.SetWorldSize(4); ...
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "monitoring/membership_reason.h"

namespace elastic::monitoring {

class TrainingMetrics {
 public:
  // Creates the metrics in a registry of their own (see registry()).
  TrainingMetrics();

  TrainingMetrics(const TrainingMetrics&) = delete;
  TrainingMetrics& operator=(const TrainingMetrics&) = delete;

  // For MetricsExposer::Serve.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // The current values in the text exposition format (what /metrics serves).
  std::string Serialize() const;

  // --- Progress. Values that can go back (a restore after a failure rewinds
  // the step) are gauges. Bad values throw std::invalid_argument naming them:
  // an accuracy of 93.5 is a caller's bug, not a measurement.
  void SetImagesPerSecond(double images_per_second);  // whole world, >= 0
  void SetTokensPerSecond(double tokens_per_second);  // a language model's, >= 0
  void SetTrainLoss(double loss);                     // any value; NaN shows a divergence
  void SetTrainAccuracy(double fraction);             // in [0, 1]
  void SetTestAccuracy(double fraction);              // in [0, 1]
  void SetTestLoss(double loss);                      // any value, as the train loss
  void SetLearningRate(double lr);                    // >= 0
  void SetEpoch(int64_t epoch);                       // >= 0
  void SetStep(int64_t global_step);                  // >= 0
  // Every sample a rank trained on, redone ones after a failure included.
  void AddSamplesProcessed(uint64_t samples);

  // --- Membership.
  void SetWorldSize(int64_t workers);      // >= 0
  void SetGeneration(int64_t generation);  // >= 0
  void RecordMembershipChange(MembershipChangeReason reason, uint64_t workers = 1);
  // Wall time from noticing a change to training again with the new world.
  void ObserveRescaleDuration(double seconds);

  // --- Communication.
  // Upper bounds (seconds) of the allreduce duration buckets. Processes that
  // count allreduces for this one to export (the workers) bucket by these.
  static const std::vector<double>& AllreduceDurationBuckets();
  // One allreduce call: its wall time and the payload bytes this rank sent.
  void ObserveAllreduce(double seconds, uint64_t bytes);
  // Allreduce calls counted elsewhere: bucket_counts[i] calls took at most
  // AllreduceDurationBuckets()[i] seconds (and more than the bound before), the
  // last entry counts those beyond every bound (+Inf); seconds is their sum.
  // Throws std::invalid_argument for a wrong number of buckets or a bad sum.
  void AddAllreduces(const std::vector<uint64_t>& bucket_counts, double seconds, uint64_t bytes);

  // --- Per rank. One row per live rank, labelled rank="N".
  void SetRankStepTime(int64_t rank, double seconds);
  // The rank's share of a step (samples) and its speed (samples a second of
  // its own work), as the last plan of shares sized by speed set them.
  void SetRankShare(int64_t rank, int64_t share, double samples_per_second);
  // Drops the row of a rank that left...
  void RemoveRank(int64_t rank);
  // ...or of every rank >= world_size after a rescale renumbered them.
  void RetainRanks(int64_t world_size);

  // --- Runtime health.
  void AddRuntimeMessages(uint64_t messages);
  void AddHeartbeatMisses(uint64_t misses = 1);

 private:
  std::shared_ptr<prometheus::Registry> registry_;

  prometheus::Gauge& images_per_second_;
  prometheus::Gauge& tokens_per_second_;
  prometheus::Gauge& train_loss_;
  prometheus::Gauge& train_accuracy_;
  prometheus::Gauge& test_accuracy_;
  prometheus::Gauge& test_loss_;
  prometheus::Gauge& learning_rate_;
  prometheus::Gauge& epoch_;
  prometheus::Gauge& step_;
  prometheus::Counter& samples_processed_;

  prometheus::Gauge& world_size_;
  prometheus::Gauge& generation_;
  prometheus::Family<prometheus::Counter>& membership_changes_;
  prometheus::Histogram& rescale_duration_;

  prometheus::Histogram& allreduce_duration_;
  prometheus::Counter& allreduce_bytes_;

  prometheus::Counter& runtime_messages_;
  prometheus::Counter& heartbeat_misses_;

  // Family::Add/Remove are thread-safe on their own; the mutex keeps the
  // rank -> row map and the family in step.
  std::mutex rank_mutex_;
  prometheus::Family<prometheus::Gauge>& rank_step_time_;
  prometheus::Family<prometheus::Gauge>& rank_share_;
  prometheus::Family<prometheus::Gauge>& rank_speed_;
  struct RankRow {  // each made when first set
    prometheus::Gauge* step_time = nullptr;
    prometheus::Gauge* share = nullptr;
    prometheus::Gauge* speed = nullptr;
  };
  std::map<int64_t, RankRow> rank_rows_;
  void RemoveRow(const RankRow& row);
};

}  // namespace elastic::monitoring
