#include "trainer/elastic/job_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

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

}  // namespace
}  // namespace elastic::trainer
