// A real Prometheus server (Debian's /usr/bin/prometheus) scrapes the metrics
// endpoint through the shipped scrape config; the test changes the job's
// world size as a failure would and reads the series back through
// Prometheus's HTTP API. Every PromQL query of the shipped dashboard is also
// evaluated by that server, so a syntax error in a panel fails here.
#include "monitoring/testing/prometheus_server.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "monitoring/metrics_exposer.h"
#include "monitoring/testing/http_get.h"
#include "monitoring/testing/runfiles.h"
#include "monitoring/training_metrics.h"

namespace elastic::monitoring {
namespace {

using nlohmann::json;
using testing::HttpGet;
using testing::PrometheusServer;

// Each Grafana query with the dashboard's variables filled in as Grafana
// would, so Prometheus can evaluate it.
std::vector<std::string> DashboardQueries() {
  const json dashboard = json::parse(testing::ReadTextFile(
      testing::RunfilePath("monitoring/grafana/dashboards/elastic-training.json")));
  std::vector<std::string> queries;
  std::function<void(const json&)> walk = [&](const json& node) {
    if (node.is_object()) {
      for (const auto& [key, value] : node.items()) {
        if (key == "expr" && value.is_string()) {
          std::string q = value.get<std::string>();
          q = std::regex_replace(q, std::regex(R"(\$__rate_interval|\$__interval|\$__range)"),
                                 "20s");
          q = std::regex_replace(q, std::regex(R"(\$job)"), ".*");
          queries.push_back(q);
        } else {
          walk(value);
        }
      }
    } else if (node.is_array()) {
      for (const json& item : node) walk(item);
    }
  };
  walk(dashboard);
  return queries;
}

TEST(PrometheusServerTest, ScrapesTheJobAndSeesAMembershipChange) {
  TrainingMetrics metrics;
  MetricsOptions options;
  options.port = 0;
  MetricsExposer exposer(options);
  exposer.Serve(metrics.registry());

  // Generation 1: four workers, one epoch done.
  metrics.SetWorldSize(4);
  metrics.SetGeneration(1);
  metrics.RecordMembershipChange(MembershipChangeReason::kJoin, 4);
  metrics.SetEpoch(1);
  metrics.SetTrainAccuracy(0.55);
  metrics.SetTestAccuracy(0.42);
  metrics.SetImagesPerSecond(1850);
  for (int rank = 0; rank < 4; ++rank) metrics.SetRankStepTime(rank, 0.1);
  metrics.ObserveAllreduce(0.003, 1 << 20);
  metrics.AddSamplesProcessed(50000);

  // The shipped scrape config, pointed at this endpoint and scraping every second.
  PrometheusServer prometheus(
      testing::ScrapeConfigFor(
          testing::ReadTextFile(testing::RunfilePath("monitoring/prometheus.yml")),
          "127.0.0.1:" + std::to_string(exposer.port())),
      testing::TestTempDir() + "/prometheus");

  prometheus.WaitUntil("the first scrape", [&] {
    return prometheus.Scalar("elastic_world_size{job=\"elastic\"}") == 4.0;
  });
  EXPECT_EQ(prometheus.Scalar("up{job=\"elastic\"}"), 1.0);
  EXPECT_EQ(prometheus.Scalar("elastic_test_accuracy_ratio"), 0.42);
  EXPECT_EQ(prometheus.Scalar("elastic_train_accuracy_ratio"), 0.55);
  EXPECT_EQ(prometheus.Scalar("count(elastic_rank_step_duration_seconds)"), 4.0);

  // A worker fails: generation 2 with three workers, a rescale, training on.
  metrics.RecordMembershipChange(MembershipChangeReason::kFailure);
  metrics.AddHeartbeatMisses(3);
  metrics.SetWorldSize(3);
  metrics.SetGeneration(2);
  metrics.RemoveRank(3);
  metrics.ObserveRescaleDuration(1.2);
  metrics.SetEpoch(2);
  metrics.SetTestAccuracy(0.47);
  metrics.AddSamplesProcessed(50000);

  prometheus.WaitUntil("the world size after the failure", [&] {
    return prometheus.Scalar("elastic_world_size") == 3.0 &&
           prometheus.Scalar("elastic_generation") == 2.0 &&
           prometheus.Scalar("elastic_test_accuracy_ratio") == 0.47;
  });
  EXPECT_EQ(prometheus.Scalar("elastic_membership_changes_total{reason=\"failure\"}"), 1.0);
  EXPECT_EQ(prometheus.Scalar("elastic_membership_changes_total{reason=\"join\"}"), 4.0);
  EXPECT_EQ(prometheus.Scalar("elastic_heartbeat_misses_total"), 3.0);
  EXPECT_EQ(prometheus.Scalar("elastic_rescale_duration_seconds_count"), 1.0);
  EXPECT_EQ(prometheus.Scalar("count(elastic_rank_step_duration_seconds)"), 3.0);
  // The stored series holds both worlds, in order.
  EXPECT_EQ(prometheus.Scalar("max_over_time(elastic_world_size[10m])"), 4.0);
  EXPECT_EQ(prometheus.Scalar("min_over_time(elastic_world_size[10m])"), 3.0);
  EXPECT_EQ(prometheus.Scalar("changes(elastic_generation[10m])"), 1.0);
  EXPECT_EQ(prometheus.Scalar("max_over_time(elastic_test_accuracy_ratio[10m])"), 0.47);
  EXPECT_EQ(prometheus.Scalar("min_over_time(elastic_test_accuracy_ratio[10m])"), 0.42);
  // Accuracy stayed a ratio throughout.
  EXPECT_LE(*prometheus.Scalar("max_over_time(elastic_train_accuracy_ratio[10m])"), 1.0);
  EXPECT_GE(*prometheus.Scalar("min_over_time(elastic_train_accuracy_ratio[10m])"), 0.0);

  // The dashboard's queries are valid PromQL for this server, and the job
  // variable of the dashboard finds this job.
  const std::vector<std::string> queries = DashboardQueries();
  ASSERT_GE(queries.size(), 20u);
  for (const std::string& query : queries) {
    const PrometheusServer::QueryResult result = prometheus.Query(query);
    EXPECT_TRUE(result.data.has_value()) << "dashboard query rejected: " << query << "\n"
                                         << result.error;
  }
  EXPECT_EQ(prometheus.Scalar("max(elastic_world_size{job=~\".*\"})"), 3.0);
  const auto labels =
      HttpGet(prometheus.Url("/api/v1/label/job/values?match[]=elastic_world_size"), 10);
  EXPECT_NE(labels.body.find("\"elastic\""), std::string::npos) << labels.body << labels.error;

  // SIGTERM shuts it down cleanly (nothing is left running after the test).
  const int status = prometheus.Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "Prometheus did not exit cleanly on SIGTERM (status " << status << "); log:\n"
      << prometheus.LogTail();
}

}  // namespace
}  // namespace elastic::monitoring
