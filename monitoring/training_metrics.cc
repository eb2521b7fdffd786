#include "monitoring/training_metrics.h"

#include <prometheus/text_serializer.h>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace elastic::monitoring {

namespace {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Registry;

Gauge& MakeGauge(Registry& registry, const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

Counter& MakeCounter(Registry& registry, const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

Histogram& MakeHistogram(Registry& registry, const std::string& name, const std::string& help,
                         Histogram::BucketBoundaries buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add(
      {}, std::move(buckets));
}

// A rebuild between epochs takes a fraction of a second; one after a failure
// waits for the failure detector and can take tens of seconds.
Histogram::BucketBoundaries RescaleBuckets() {
  return {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300};
}

void RequireFraction(const char* what, double value) {
  if (!(value >= 0.0 && value <= 1.0)) {
    throw std::invalid_argument(std::string(what) + " must be a fraction in [0, 1], got " +
                                std::to_string(value));
  }
}

void RequireNonNegative(const char* what, double value) {
  if (!(value >= 0.0) || std::isinf(value)) {
    throw std::invalid_argument(std::string(what) + " must be finite and >= 0, got " +
                                std::to_string(value));
  }
}

}  // namespace

// Allreduces of small buckets take ~100 us on loopback; a stalled one over a
// slow link seconds.
const std::vector<double>& TrainingMetrics::AllreduceDurationBuckets() {
  static const std::vector<double> buckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                              0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                              1,      2.5,     5,      10};
  return buckets;
}

TrainingMetrics::TrainingMetrics()
    : registry_(std::make_shared<Registry>()),
      images_per_second_(MakeGauge(*registry_, "elastic_train_images_per_second",
                                   "Training throughput of the whole world, images per second")),
      tokens_per_second_(MakeGauge(*registry_, "elastic_train_tokens_per_second",
                                   "Training throughput of the whole world, tokens per second "
                                   "(a language model's; 0 for other tasks)")),
      train_loss_(MakeGauge(*registry_, "elastic_train_loss",
                            "Mean training loss over the samples reported last")),
      train_accuracy_(MakeGauge(*registry_, "elastic_train_accuracy_ratio",
                                "Training accuracy over the samples reported last, in [0, 1]")),
      test_accuracy_(MakeGauge(*registry_, "elastic_test_accuracy_ratio",
                               "Test-set accuracy after the last evaluation, in [0, 1]")),
      test_loss_(MakeGauge(*registry_, "elastic_test_loss",
                           "Test-set (validation) loss after the last evaluation")),
      learning_rate_(MakeGauge(*registry_, "elastic_learning_rate", "Current learning rate")),
      epoch_(MakeGauge(*registry_, "elastic_epoch", "Current epoch (0-based)")),
      step_(MakeGauge(*registry_, "elastic_step",
                      "Global optimizer step; goes back when a failure restores a commit")),
      samples_processed_(MakeCounter(*registry_, "elastic_samples_processed_total",
                                     "Training samples processed by all ranks, redone ones "
                                     "after a failure included")),
      world_size_(MakeGauge(*registry_, "elastic_world_size", "Workers in the current generation")),
      generation_(MakeGauge(*registry_, "elastic_generation",
                            "Membership generation; bumped at every change of the worker set")),
      membership_changes_(prometheus::BuildCounter()
                              .Name("elastic_membership_changes_total")
                              .Help("Workers that joined, left or failed, by reason")
                              .Register(*registry_)),
      rescale_duration_(MakeHistogram(*registry_, "elastic_rescale_duration_seconds",
                                      "Seconds from a membership change to training again with "
                                      "the new world",
                                      RescaleBuckets())),
      allreduce_duration_(MakeHistogram(*registry_, "elastic_allreduce_duration_seconds",
                                        "Wall time of one allreduce call",
                                        AllreduceDurationBuckets())),
      allreduce_bytes_(MakeCounter(*registry_, "elastic_allreduce_bytes_total",
                                   "Payload bytes allreduced by this process")),
      runtime_messages_(MakeCounter(*registry_, "elastic_runtime_messages_total",
                                    "Messages handled by the actor runtime")),
      heartbeat_misses_(MakeCounter(*registry_, "elastic_heartbeat_misses_total",
                                    "Heartbeats a worker failed to send in time")),
      rank_step_time_(prometheus::BuildGauge()
                          .Name("elastic_rank_step_duration_seconds")
                          .Help("Wall time of the last training step, per rank")
                          .Register(*registry_)),
      rank_share_(prometheus::BuildGauge()
                      .Name("elastic_rank_share_samples")
                      .Help("Samples of a step this rank trains (shares sized by speed)")
                      .Register(*registry_)),
      rank_speed_(prometheus::BuildGauge()
                      .Name("elastic_rank_speed_samples_per_second")
                      .Help("Samples a second of this rank's own work, as shares were last planned")
                      .Register(*registry_)) {
  // Every reason exists from the start at 0, so rate() and increase() see the
  // first change instead of a series that appears out of nowhere.
  for (MembershipChangeReason reason : kAllMembershipChangeReasons) {
    membership_changes_.Add({{"reason", ReasonName(reason)}});
  }
}

std::string TrainingMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

void TrainingMetrics::SetImagesPerSecond(double images_per_second) {
  RequireNonNegative("images per second", images_per_second);
  images_per_second_.Set(images_per_second);
}

void TrainingMetrics::SetTokensPerSecond(double tokens_per_second) {
  RequireNonNegative("tokens per second", tokens_per_second);
  tokens_per_second_.Set(tokens_per_second);
}

void TrainingMetrics::SetTrainLoss(double loss) { train_loss_.Set(loss); }

void TrainingMetrics::SetTrainAccuracy(double fraction) {
  RequireFraction("train accuracy", fraction);
  train_accuracy_.Set(fraction);
}

void TrainingMetrics::SetTestLoss(double loss) { test_loss_.Set(loss); }

void TrainingMetrics::SetTestAccuracy(double fraction) {
  RequireFraction("test accuracy", fraction);
  test_accuracy_.Set(fraction);
}

void TrainingMetrics::SetLearningRate(double lr) {
  RequireNonNegative("learning rate", lr);
  learning_rate_.Set(lr);
}

void TrainingMetrics::SetEpoch(int64_t epoch) {
  RequireNonNegative("epoch", static_cast<double>(epoch));
  epoch_.Set(static_cast<double>(epoch));
}

void TrainingMetrics::SetStep(int64_t global_step) {
  RequireNonNegative("step", static_cast<double>(global_step));
  step_.Set(static_cast<double>(global_step));
}

void TrainingMetrics::AddSamplesProcessed(uint64_t samples) {
  samples_processed_.Increment(static_cast<double>(samples));
}

void TrainingMetrics::SetWorldSize(int64_t workers) {
  RequireNonNegative("world size", static_cast<double>(workers));
  world_size_.Set(static_cast<double>(workers));
}

void TrainingMetrics::SetGeneration(int64_t generation) {
  RequireNonNegative("generation", static_cast<double>(generation));
  generation_.Set(static_cast<double>(generation));
}

void TrainingMetrics::RecordMembershipChange(MembershipChangeReason reason, uint64_t workers) {
  // Add returns the existing row for labels it has seen.
  membership_changes_.Add({{"reason", ReasonName(reason)}}).Increment(static_cast<double>(workers));
}

void TrainingMetrics::ObserveRescaleDuration(double seconds) {
  RequireNonNegative("rescale duration", seconds);
  rescale_duration_.Observe(seconds);
}

void TrainingMetrics::ObserveAllreduce(double seconds, uint64_t bytes) {
  RequireNonNegative("allreduce duration", seconds);
  allreduce_duration_.Observe(seconds);
  allreduce_bytes_.Increment(static_cast<double>(bytes));
}

void TrainingMetrics::AddAllreduces(const std::vector<uint64_t>& bucket_counts, double seconds,
                                    uint64_t bytes) {
  if (bucket_counts.size() != AllreduceDurationBuckets().size() + 1) {
    throw std::invalid_argument("allreduce histogram needs " +
                                std::to_string(AllreduceDurationBuckets().size() + 1) +
                                " bucket counts, got " + std::to_string(bucket_counts.size()));
  }
  RequireNonNegative("allreduce duration sum", seconds);
  std::vector<double> increments(bucket_counts.begin(), bucket_counts.end());
  allreduce_duration_.ObserveMultiple(increments, seconds);
  allreduce_bytes_.Increment(static_cast<double>(bytes));
}

void TrainingMetrics::SetRankStepTime(int64_t rank, double seconds) {
  RequireNonNegative("rank", static_cast<double>(rank));
  RequireNonNegative("step time", seconds);
  std::lock_guard<std::mutex> lock(rank_mutex_);
  prometheus::Gauge*& gauge = rank_rows_[rank].step_time;
  if (gauge == nullptr) gauge = &rank_step_time_.Add({{"rank", std::to_string(rank)}});
  gauge->Set(seconds);
}

void TrainingMetrics::SetRankShare(int64_t rank, int64_t share, double samples_per_second) {
  RequireNonNegative("rank", static_cast<double>(rank));
  RequireNonNegative("share", static_cast<double>(share));
  RequireNonNegative("speed", samples_per_second);
  std::lock_guard<std::mutex> lock(rank_mutex_);
  RankRow& row = rank_rows_[rank];
  if (row.share == nullptr) row.share = &rank_share_.Add({{"rank", std::to_string(rank)}});
  if (row.speed == nullptr) row.speed = &rank_speed_.Add({{"rank", std::to_string(rank)}});
  row.share->Set(static_cast<double>(share));
  row.speed->Set(samples_per_second);
}

void TrainingMetrics::RemoveRow(const RankRow& row) {
  if (row.step_time != nullptr) rank_step_time_.Remove(row.step_time);
  if (row.share != nullptr) rank_share_.Remove(row.share);
  if (row.speed != nullptr) rank_speed_.Remove(row.speed);
}

void TrainingMetrics::RemoveRank(int64_t rank) {
  std::lock_guard<std::mutex> lock(rank_mutex_);
  auto it = rank_rows_.find(rank);
  if (it == rank_rows_.end()) return;
  RemoveRow(it->second);
  rank_rows_.erase(it);
}

void TrainingMetrics::RetainRanks(int64_t world_size) {
  std::lock_guard<std::mutex> lock(rank_mutex_);
  for (auto it = rank_rows_.lower_bound(world_size < 0 ? 0 : world_size); it != rank_rows_.end();) {
    RemoveRow(it->second);
    it = rank_rows_.erase(it);
  }
}

void TrainingMetrics::AddRuntimeMessages(uint64_t messages) {
  runtime_messages_.Increment(static_cast<double>(messages));
}

void TrainingMetrics::AddHeartbeatMisses(uint64_t misses) {
  heartbeat_misses_.Increment(static_cast<double>(misses));
}

}  // namespace elastic::monitoring
