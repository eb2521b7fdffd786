#include "trainer/elastic/controller/job_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "monitoring/testing/exposition.h"

namespace elastic::trainer {
namespace {

// What the driver fills in from rank 0's proto::Progress and proto::EpochSummary.
ProgressReport Progress(int64_t step, double seen, double loss, double accuracy) {
  ProgressReport p;
  p.generation = 2;
  p.epoch = 0;
  p.step = step;
  p.steps_in_epoch = 16;
  p.step_in_epoch = step;
  p.seen = seen;
  p.loss = loss;
  p.accuracy = accuracy;
  p.lr = 0.1;
  p.world = 3;
  return p;
}

TEST(JobMetricsTest, FeedsTheMetricsAndTheReport) {
  monitoring::MetricsOptions options;
  options.port = 0;
  JobMetrics job(options, false);
  EXPECT_NE(job.url().find("http://127.0.0.1:"), std::string::npos);
  job.OnGeneration(1, 4);
  job.OnGeneration(2, 3);
  job.metrics().RecordMembershipChange(monitoring::MembershipChangeReason::kFailure);
  job.OnRescale(0.25);
  job.OnProgress(Progress(10, 640, 1.5, 0.5));
  job.OnProgress(Progress(11, 704, 1.4, 0.55));
  EpochReport epoch;
  epoch.epoch = 1;
  epoch.world = 3;
  epoch.train_loss = 1.4;
  epoch.train_accuracy = 0.55;
  epoch.test_loss = 1.5;
  epoch.test_accuracy = 0.5;
  epoch.images_per_second = 300;
  epoch.seconds = 3.0;
  job.OnEpoch(epoch);
  const std::string text = job.metrics().Serialize();
  EXPECT_NE(text.find("elastic_world_size 3"), std::string::npos) << text;
  EXPECT_NE(text.find("elastic_generation 2"), std::string::npos) << text;
  EXPECT_NE(text.find("elastic_membership_changes_total{reason=\"failure\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("elastic_samples_processed_total 64"), std::string::npos) << text;
  EXPECT_NE(text.find("elastic_test_accuracy_ratio 0.5"), std::string::npos) << text;
  EXPECT_NE(text.find("elastic_rescale_duration_seconds_count 1"), std::string::npos) << text;
}

TEST(JobMetricsTest, ALanguageModelCountsTokens) {
  monitoring::MetricsOptions options;
  options.port = 0;
  JobMetrics job(options, false);
  job.SetTokensPerSample(64);
  job.OnGeneration(1, 2);
  EpochReport epoch;
  epoch.epoch = 1;
  epoch.world = 2;
  epoch.test_accuracy = 0.25;
  epoch.images_per_second = 50;  // windows of 64 tokens
  job.OnEpoch(epoch);
  const std::string text = job.metrics().Serialize();
  EXPECT_NE(text.find("elastic_train_images_per_second 50"), std::string::npos) << text;
  EXPECT_NE(text.find("elastic_train_tokens_per_second 3200"), std::string::npos) << text;
  // --eval-every: an evaluation inside the next epoch moves the test gauges.
  job.OnEvaluation(1.875, 0.375);
  const std::string evaluated = job.metrics().Serialize();
  EXPECT_NE(evaluated.find("elastic_test_loss 1.875"), std::string::npos) << evaluated;
  EXPECT_NE(evaluated.find("elastic_test_accuracy_ratio 0.375"), std::string::npos) << evaluated;
}

TEST(JobMetricsTest, ABusyDefaultPortIsAWarningAnExplicitOneAnError) {
  monitoring::MetricsOptions options;
  options.port = 0;
  JobMetrics first(options, false);
  const std::string url = first.url();
  options.port = std::stoi(url.substr(url.rfind(':') + 1));
  JobMetrics quiet(options, /*port_is_default=*/true);
  EXPECT_EQ(quiet.url(), "");
  EXPECT_THROW(JobMetrics(options, false), monitoring::MetricsError);
}

using monitoring::testing::Exposition;
using monitoring::testing::ParseExposition;

JobMetrics QuietJob() {
  monitoring::MetricsOptions options;
  options.port = 0;
  return JobMetrics(options, false);
}

Exposition Scrape(JobMetrics& job) { return ParseExposition(job.metrics().Serialize()); }

// A record as a worker would publish it after `allreduces` calls of 2 ms and
// `bytes` bytes in all, its last step (of 0.1 s) at `rank` in `generation`.
WorkerStatsRecord Record(uint64_t generation, int64_t rank, uint64_t allreduces, uint64_t bytes) {
  WorkerStats stats;
  for (uint64_t i = 0; i < allreduces; ++i) stats.ObserveAllreduce(0.002, bytes / allreduces);
  stats.ObserveStep(generation, rank, 0.1 * (rank + 1));
  return stats.Snapshot();
}

TEST(JobMetricsWorkerStatsTest, TheSameCumulativeRecordTwiceCountsOnce) {
  JobMetrics job = QuietJob();
  job.OnGeneration(1, 2);
  job.OnWorkerStats(11, Record(1, 0, 4, 4000));
  job.OnWorkerStats(11, Record(1, 0, 4, 4000));  // delivered again
  job.OnWorkerStats(12, Record(1, 1, 4, 4000));
  Exposition e = Scrape(job);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_count"), 8);
  EXPECT_EQ(e.Value("elastic_allreduce_bytes_total"), 8000);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_bucket", {{"le", "0.0025"}}), 8);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_bucket", {{"le", "0.001"}}), 0);
  EXPECT_NEAR(*e.Value("elastic_allreduce_duration_seconds_sum"), 8 * 0.002, 1e-12);
  EXPECT_NEAR(*e.Value("elastic_rank_step_duration_seconds", {{"rank", "0"}}), 0.1, 1e-12);
  EXPECT_NEAR(*e.Value("elastic_rank_step_duration_seconds", {{"rank", "1"}}), 0.2, 1e-12);

  // A later record of member 11 adds only what is new; one that was never
  // delivered is included in it.
  job.OnWorkerStats(11, Record(1, 0, 10, 10000));
  e = Scrape(job);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_count"), 14);
  EXPECT_EQ(e.Value("elastic_allreduce_bytes_total"), 14000);
}

TEST(JobMetricsWorkerStatsTest, CountersNeverDecreaseWhenARankIsReused) {
  JobMetrics job = QuietJob();
  job.OnGeneration(1, 2);
  job.OnWorkerStats(1, Record(1, 0, 5, 500));
  job.OnWorkerStats(2, Record(1, 1, 5, 500));
  // Member 2 fails; member 3 joins and takes rank 1 in generation 3. Its
  // counts start from zero, but they are its own: the job's totals add up.
  job.OnGeneration(2, 1);
  job.OnGeneration(3, 2);
  job.OnWorkerStats(2, Record(1, 1, 5, 500));  // the departed member's last record, again
  Exposition e = Scrape(job);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_count"), 10);
  EXPECT_FALSE(e.Value("elastic_rank_step_duration_seconds", {{"rank", "1"}}))
      << "a record of generation 1 set the row of rank 1 in generation 3";
  job.OnWorkerStats(3, Record(3, 1, 2, 200));
  e = Scrape(job);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_count"), 12);
  EXPECT_EQ(e.Value("elastic_allreduce_bytes_total"), 1200);
  EXPECT_NEAR(*e.Value("elastic_rank_step_duration_seconds", {{"rank", "1"}}), 0.2, 1e-12);
}

TEST(JobMetricsWorkerStatsTest, BadOrBackwardRecordsAreRefusedAndFoldNothing) {
  JobMetrics job = QuietJob();
  job.OnGeneration(1, 1);
  job.OnWorkerStats(1, Record(1, 0, 6, 600));
  auto reason = [&job](const WorkerStatsRecord& record) {
    try {
      job.OnWorkerStats(1, record);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  WorkerStatsRecord bad = Record(1, 0, 9, 900);
  bad.allreduce_buckets.resize(3);  // another histogram than the driver's
  EXPECT_NE(reason(bad).find("3 allreduce buckets"), std::string::npos) << reason(bad);
  bad = Record(1, 0, 9, 900);
  bad.allreduce_buckets.push_back(1);
  EXPECT_NE(reason(bad).find("allreduce buckets"), std::string::npos) << reason(bad);
  bad = Record(1, 0, 9, 900);
  bad.step_seconds = -0.5;
  EXPECT_NE(reason(bad).find("step time"), std::string::npos) << reason(bad);
  bad = Record(1, 0, 9, 900);
  bad.allreduce_seconds = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(reason(bad).find("allreduce seconds"), std::string::npos) << reason(bad);
  bad = Record(1, 0, 9, 900);
  bad.rank = -2;
  EXPECT_NE(reason(bad).find("negative rank"), std::string::npos) << reason(bad);
  try {
    job.OnWorkerStats(1, Record(1, 0, 3, 300));
    FAIL() << "a record whose counts went back was folded in";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("went back"), std::string::npos) << e.what();
  }
  Exposition e = Scrape(job);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_count"), 6);
  EXPECT_EQ(e.Value("elastic_allreduce_bytes_total"), 600);
  // The member's baseline is still its last good record.
  job.OnWorkerStats(1, Record(1, 0, 7, 700));
  EXPECT_EQ(Scrape(job).Value("elastic_allreduce_duration_seconds_count"), 7);
}

TEST(JobMetricsWorkerStatsTest, RuntimeCountersFoldTheHeadsCumulativeCounts) {
  JobMetrics job = QuietJob();
  job.OnRuntimeStats(100, 0);
  job.OnRuntimeStats(100, 0);
  job.OnRuntimeStats(150, 3);
  job.OnRuntimeStats(120, 2);  // never happens with one head; must not subtract
  Exposition e = Scrape(job);
  EXPECT_EQ(e.Value("elastic_runtime_messages_total"), 150);
  EXPECT_EQ(e.Value("elastic_heartbeat_misses_total"), 3);
  job.OnRuntimeStats(160, 3);
  EXPECT_EQ(Scrape(job).Value("elastic_runtime_messages_total"), 160);
}

}  // namespace
}  // namespace elastic::trainer
