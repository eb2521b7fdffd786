#include "monitoring/training_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <thread>
#include <vector>

#include "monitoring/testing/exposition.h"

namespace elastic::monitoring {
namespace {

using testing::Exposition;
using testing::ParseExposition;
using testing::Sample;

Exposition Scrape(const TrainingMetrics& metrics) { return ParseExposition(metrics.Serialize()); }

TEST(TrainingMetricsTest, EveryFamilyFollowsTheNamingConventions) {
  TrainingMetrics metrics;
  metrics.SetRankStepTime(0, 0.1);  // a labelled family without rows is not exported
  const Exposition e = Scrape(metrics);
  const std::map<std::string, std::string> expected = {
      {"elastic_train_images_per_second", "gauge"},
      {"elastic_train_tokens_per_second", "gauge"},
      {"elastic_train_loss", "gauge"},
      {"elastic_train_accuracy_ratio", "gauge"},
      {"elastic_test_accuracy_ratio", "gauge"},
      {"elastic_test_loss", "gauge"},
      {"elastic_learning_rate", "gauge"},
      {"elastic_epoch", "gauge"},
      {"elastic_step", "gauge"},
      {"elastic_samples_processed_total", "counter"},
      {"elastic_world_size", "gauge"},
      {"elastic_generation", "gauge"},
      {"elastic_membership_changes_total", "counter"},
      {"elastic_rescale_duration_seconds", "histogram"},
      {"elastic_allreduce_duration_seconds", "histogram"},
      {"elastic_allreduce_bytes_total", "counter"},
      {"elastic_rank_step_duration_seconds", "gauge"},
      {"elastic_runtime_messages_total", "counter"},
      {"elastic_heartbeat_misses_total", "counter"},
  };
  EXPECT_EQ(e.types, expected);
  for (const auto& [name, type] : e.types) {
    EXPECT_EQ(name.rfind("elastic_", 0), 0u) << name;
    const bool total = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
    EXPECT_EQ(total, type == "counter") << name << " is a " << type;
    EXPECT_FALSE(e.help.at(name).empty()) << name;
  }
}

TEST(TrainingMetricsTest, GaugesHoldTheLastValueSet) {
  TrainingMetrics metrics;
  metrics.SetImagesPerSecond(1875.5);
  metrics.SetTokensPerSecond(120032);
  metrics.SetTrainLoss(0.42);
  metrics.SetTrainAccuracy(0.875);
  metrics.SetTestAccuracy(0.8125);
  metrics.SetTestLoss(1.4697);
  metrics.SetLearningRate(0.4);
  metrics.SetEpoch(3);
  metrics.SetStep(1200);
  metrics.SetStep(1100);  // a restore after a failure rewinds the step
  metrics.SetWorldSize(4);
  metrics.SetGeneration(2);
  const Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("elastic_train_images_per_second"), 1875.5);
  EXPECT_EQ(e.Value("elastic_train_tokens_per_second"), 120032);
  EXPECT_EQ(e.Value("elastic_train_loss"), 0.42);
  EXPECT_EQ(e.Value("elastic_train_accuracy_ratio"), 0.875);
  EXPECT_EQ(e.Value("elastic_test_accuracy_ratio"), 0.8125);
  EXPECT_EQ(e.Value("elastic_test_loss"), 1.4697);
  EXPECT_EQ(e.Value("elastic_learning_rate"), 0.4);
  EXPECT_EQ(e.Value("elastic_epoch"), 3);
  EXPECT_EQ(e.Value("elastic_step"), 1100);
  EXPECT_EQ(e.Value("elastic_world_size"), 4);
  EXPECT_EQ(e.Value("elastic_generation"), 2);
}

TEST(TrainingMetricsTest, MembershipChangesCountByReasonFromZero) {
  TrainingMetrics metrics;
  Exposition e = Scrape(metrics);
  for (const char* reason : {"join", "leave", "failure"}) {
    EXPECT_EQ(e.Value("elastic_membership_changes_total", {{"reason", reason}}), 0) << reason;
  }
  metrics.RecordMembershipChange(MembershipChangeReason::kJoin, 2);
  metrics.RecordMembershipChange(MembershipChangeReason::kFailure);
  metrics.RecordMembershipChange(MembershipChangeReason::kFailure);
  e = Scrape(metrics);
  EXPECT_EQ(e.Value("elastic_membership_changes_total", {{"reason", "join"}}), 2);
  EXPECT_EQ(e.Value("elastic_membership_changes_total", {{"reason", "leave"}}), 0);
  EXPECT_EQ(e.Value("elastic_membership_changes_total", {{"reason", "failure"}}), 2);
  EXPECT_EQ(e.Find("elastic_membership_changes_total").size(), 3u);
}

TEST(TrainingMetricsTest, HistogramsBucketObservationsInSeconds) {
  TrainingMetrics metrics;
  metrics.ObserveAllreduce(0.002, 1024);
  metrics.ObserveAllreduce(0.003, 1024);
  metrics.ObserveAllreduce(0.2, 4096);
  metrics.ObserveRescaleDuration(1.5);
  const Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_count"), 3);
  EXPECT_NEAR(*e.Value("elastic_allreduce_duration_seconds_sum"), 0.205, 1e-12);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_bucket", {{"le", "0.001"}}), 0);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_bucket", {{"le", "0.0025"}}), 1);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_bucket", {{"le", "0.005"}}), 2);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_bucket", {{"le", "+Inf"}}), 3);
  EXPECT_EQ(e.Value("elastic_allreduce_bytes_total"), 6144);
  EXPECT_EQ(e.Value("elastic_rescale_duration_seconds_count"), 1);
  EXPECT_EQ(e.Value("elastic_rescale_duration_seconds_bucket", {{"le", "1"}}), 0);
  EXPECT_EQ(e.Value("elastic_rescale_duration_seconds_bucket", {{"le", "2.5"}}), 1);
}

TEST(TrainingMetricsTest, AllreducesBucketedElsewhereAddUpLikeObservedOnes) {
  // The same three calls as above, bucketed by a worker: 0.002 s falls in the
  // 0.0025 bucket (index 4), 0.003 s in 0.005 (5), 0.2 s in 0.25 (10).
  const std::vector<double>& bounds = TrainingMetrics::AllreduceDurationBuckets();
  ASSERT_EQ(bounds[4], 0.0025);
  ASSERT_EQ(bounds[5], 0.005);
  ASSERT_EQ(bounds[10], 0.25);
  std::vector<uint64_t> counts(bounds.size() + 1, 0);
  counts[4] = 1;
  counts[5] = 1;
  counts[10] = 1;
  TrainingMetrics observed, added;
  observed.ObserveAllreduce(0.002, 1024);
  observed.ObserveAllreduce(0.003, 1024);
  observed.ObserveAllreduce(0.2, 4096);
  added.AddAllreduces(counts, 0.205, 6144);
  const Exposition a = Scrape(observed), b = Scrape(added);
  for (const Sample& sample : a.Find("elastic_allreduce_duration_seconds_bucket")) {
    EXPECT_EQ(b.Value(sample.name, sample.labels), sample.value) << sample.labels.at("le");
  }
  EXPECT_EQ(b.Value("elastic_allreduce_duration_seconds_count"), 3);
  EXPECT_NEAR(*b.Value("elastic_allreduce_duration_seconds_sum"), 0.205, 1e-12);
  EXPECT_EQ(b.Value("elastic_allreduce_bytes_total"), 6144);

  EXPECT_THROW(added.AddAllreduces({1, 2}, 0.1, 8), std::invalid_argument);
  EXPECT_THROW(added.AddAllreduces(counts, -1, 8), std::invalid_argument);
  EXPECT_EQ(Scrape(added).Value("elastic_allreduce_duration_seconds_count"), 3);
}

TEST(TrainingMetricsTest, RankRowsFollowTheLiveRanks) {
  TrainingMetrics metrics;
  for (int rank = 0; rank < 4; ++rank) metrics.SetRankStepTime(rank, 0.1 * (rank + 1));
  metrics.SetRankStepTime(2, 0.25);
  Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Find("elastic_rank_step_duration_seconds").size(), 4u);
  EXPECT_EQ(e.Value("elastic_rank_step_duration_seconds", {{"rank", "2"}}), 0.25);

  metrics.RemoveRank(3);
  metrics.RemoveRank(7);  // never seen: nothing to do
  e = Scrape(metrics);
  EXPECT_EQ(e.Find("elastic_rank_step_duration_seconds").size(), 3u);
  EXPECT_FALSE(e.Value("elastic_rank_step_duration_seconds", {{"rank", "3"}}).has_value());

  metrics.RetainRanks(2);  // world shrank to 2: ranks 0 and 1 remain
  e = Scrape(metrics);
  std::set<std::string> ranks;
  for (const auto& s : e.Find("elastic_rank_step_duration_seconds"))
    ranks.insert(s.labels.at("rank"));
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1"}));

  metrics.SetRankStepTime(3, 0.5);  // a rank can come back after a join
  EXPECT_EQ(Scrape(metrics).Value("elastic_rank_step_duration_seconds", {{"rank", "3"}}), 0.5);
}

TEST(TrainingMetricsTest, RankSharesAndSpeedsFollowTheLiveRanks) {
  TrainingMetrics metrics;
  metrics.SetRankShare(0, 85, 1200.5);
  metrics.SetRankShare(1, 43, 600.25);
  Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("elastic_rank_share_samples", {{"rank", "0"}}), 85);
  EXPECT_EQ(e.Value("elastic_rank_share_samples", {{"rank", "1"}}), 43);
  EXPECT_EQ(e.Value("elastic_rank_speed_samples_per_second", {{"rank", "1"}}), 600.25);
  metrics.SetRankShare(1, 64, 1100);  // re-planned
  EXPECT_EQ(Scrape(metrics).Value("elastic_rank_share_samples", {{"rank", "1"}}), 64);
  metrics.RetainRanks(1);  // the world shrank: rank 1's rows go, all of them
  e = Scrape(metrics);
  EXPECT_FALSE(e.Value("elastic_rank_share_samples", {{"rank", "1"}}).has_value());
  EXPECT_FALSE(e.Value("elastic_rank_speed_samples_per_second", {{"rank", "1"}}).has_value());
  EXPECT_EQ(e.Value("elastic_rank_share_samples", {{"rank", "0"}}), 85);
  EXPECT_THROW(metrics.SetRankShare(0, -1, 5), std::invalid_argument);
  EXPECT_THROW(metrics.SetRankShare(0, 1, -5), std::invalid_argument);
}

TEST(TrainingMetricsTest, CountersAccumulate) {
  TrainingMetrics metrics;
  metrics.AddSamplesProcessed(128);
  metrics.AddSamplesProcessed(64);
  metrics.AddRuntimeMessages(10);
  metrics.AddHeartbeatMisses();
  metrics.AddHeartbeatMisses(2);
  const Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("elastic_samples_processed_total"), 192);
  EXPECT_EQ(e.Value("elastic_runtime_messages_total"), 10);
  EXPECT_EQ(e.Value("elastic_heartbeat_misses_total"), 3);
}

TEST(TrainingMetricsTest, ImpossibleValuesAreRejectedWithTheirName) {
  TrainingMetrics metrics;
  auto expect_rejected = [](auto&& call, const std::string& name) {
    try {
      call();
      ADD_FAILURE() << name << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  expect_rejected([&] { metrics.SetTrainAccuracy(93.5); }, "train accuracy");
  expect_rejected([&] { metrics.SetTestAccuracy(-0.1); }, "test accuracy");
  expect_rejected([&] { metrics.SetTestAccuracy(std::nan("")); }, "test accuracy");
  expect_rejected([&] { metrics.SetImagesPerSecond(-1); }, "images per second");
  expect_rejected([&] { metrics.SetTokensPerSecond(-1); }, "tokens per second");
  expect_rejected([&] { metrics.SetLearningRate(-0.1); }, "learning rate");
  expect_rejected([&] { metrics.SetWorldSize(-1); }, "world size");
  expect_rejected([&] { metrics.ObserveAllreduce(-0.5, 8); }, "allreduce duration");
  expect_rejected([&] { metrics.ObserveRescaleDuration(INFINITY); }, "rescale duration");
  expect_rejected([&] { metrics.SetRankStepTime(-1, 0.1); }, "rank");
  // Nothing was half-applied.
  const Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("elastic_train_accuracy_ratio"), 0);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_count"), 0);
  EXPECT_EQ(e.Value("elastic_allreduce_bytes_total"), 0);
  // A diverged loss is a measurement, not a bug: it is shown.
  metrics.SetTrainLoss(std::nan(""));
  EXPECT_TRUE(std::isnan(*Scrape(metrics).Value("elastic_train_loss")));
}

TEST(TrainingMetricsTest, ConcurrentUpdatesLoseNothing) {
  TrainingMetrics metrics;
  constexpr int kThreads = 4;
  constexpr int kIterations = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics, t] {
      for (int i = 0; i < kIterations; ++i) {
        metrics.AddSamplesProcessed(2);
        metrics.ObserveAllreduce(0.001, 3);
        metrics.RecordMembershipChange(MembershipChangeReason::kLeave);
        metrics.SetRankStepTime(t, 0.01);
        metrics.SetRankStepTime(kThreads + t, 0.02);
        metrics.RemoveRank(kThreads + t);
        if (i % 100 == 0) metrics.Serialize();  // a scrape racing the updates
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const Exposition e = Scrape(metrics);
  EXPECT_EQ(e.Value("elastic_samples_processed_total"), 2.0 * kThreads * kIterations);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_count"), kThreads * kIterations);
  EXPECT_EQ(e.Value("elastic_allreduce_bytes_total"), 3.0 * kThreads * kIterations);
  EXPECT_EQ(e.Value("elastic_membership_changes_total", {{"reason", "leave"}}),
            kThreads * kIterations);
  EXPECT_EQ(e.Find("elastic_rank_step_duration_seconds").size(), static_cast<size_t>(kThreads));
}

}  // namespace
}  // namespace elastic::monitoring
