#include "trainer/elastic/job_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "monitoring/testing/exposition.h"

namespace elastic::trainer {
namespace {

TEST(JobMetricsTest, ParsesWhatRankZeroReports) {
  // The exact formats worker.cc writes.
  const auto p = ParseProgressReport("3 1 57 16 9 576 1.234567 0.437500 0.05 2");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->generation, 3u);
  EXPECT_EQ(p->epoch, 1);
  EXPECT_EQ(p->step, 57);
  EXPECT_DOUBLE_EQ(p->seen, 576);
  EXPECT_DOUBLE_EQ(p->accuracy, 0.4375);
  EXPECT_EQ(p->world, 2);
  EXPECT_FALSE(ParseProgressReport("3 1 57"));

  const auto e = ParseEpochReport(
      "epoch 2/5 world 4 | train loss 2.0270 acc 22.07% | test loss 2.1111 acc 15.43% | 429 "
      "img/s | 4.4s");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->epoch, 2);
  EXPECT_EQ(e->world, 4);
  EXPECT_NEAR(e->train_accuracy, 0.2207, 1e-9);
  EXPECT_NEAR(e->test_accuracy, 0.1543, 1e-9);
  EXPECT_DOUBLE_EQ(e->images_per_second, 429);
  EXPECT_FALSE(ParseEpochReport("epoch 2/5 world"));
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
  job.OnProgress(*ParseProgressReport("2 0 10 16 10 640 1.5 0.5 0.1 3"));
  job.OnProgress(*ParseProgressReport("2 0 11 16 11 704 1.4 0.55 0.1 3"));
  job.OnEpoch(*ParseEpochReport(
      "epoch 1/2 world 3 | train loss 1.4 acc 55.00% | test loss 1.5 acc 50.00% | 300 img/s | "
      "3.0s"));
  const std::string text = job.metrics().Serialize();
  EXPECT_NE(text.find("elastic_world_size 3"), std::string::npos) << text;
  EXPECT_NE(text.find("elastic_generation 2"), std::string::npos) << text;
  EXPECT_NE(text.find("elastic_membership_changes_total{reason=\"failure\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("elastic_samples_processed_total 64"), std::string::npos) << text;
  EXPECT_NE(text.find("elastic_test_accuracy_ratio 0.5"), std::string::npos) << text;
  EXPECT_NE(text.find("elastic_rescale_duration_seconds_count 1"), std::string::npos) << text;

  const std::string dir =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
      "/job_metrics_report";
  const std::string path = job.WriteReport(dir, "test run");
  std::ifstream in(path);
  std::stringstream html;
  html << in.rdbuf();
  EXPECT_NE(html.str().find("<svg"), std::string::npos);
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
std::string Record(uint64_t generation, int64_t rank, uint64_t allreduces, uint64_t bytes) {
  WorkerStats stats;
  for (uint64_t i = 0; i < allreduces; ++i) stats.ObserveAllreduce(0.002, bytes / allreduces);
  stats.ObserveStep(generation, rank, 0.1 * (rank + 1));
  return stats.Snapshot().Encode();
}

TEST(JobMetricsWorkerStatsTest, TheSameCumulativeRecordTwiceCountsOnce) {
  JobMetrics job = QuietJob();
  job.OnGeneration(1, 2);
  job.OnWorkerStats(11, Record(1, 0, 4, 4000));
  job.OnWorkerStats(11, Record(1, 0, 4, 4000));  // read again before the next publish
  job.OnWorkerStats(12, Record(1, 1, 4, 4000));
  Exposition e = Scrape(job);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_count"), 8);
  EXPECT_EQ(e.Value("elastic_allreduce_bytes_total"), 8000);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_bucket", {{"le", "0.0025"}}), 8);
  EXPECT_EQ(e.Value("elastic_allreduce_duration_seconds_bucket", {{"le", "0.001"}}), 0);
  EXPECT_NEAR(*e.Value("elastic_allreduce_duration_seconds_sum"), 8 * 0.002, 1e-12);
  EXPECT_NEAR(*e.Value("elastic_rank_step_duration_seconds", {{"rank", "0"}}), 0.1, 1e-12);
  EXPECT_NEAR(*e.Value("elastic_rank_step_duration_seconds", {{"rank", "1"}}), 0.2, 1e-12);

  // A later record of member 11 adds only what is new; one that was missed
  // (overwritten before it was read) is included in it.
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
  job.OnWorkerStats(2, Record(1, 1, 5, 500));  // the departed member's last record, read again
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
  EXPECT_THROW(job.OnWorkerStats(1, "garbage"), std::invalid_argument);
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
