// A real Prometheus server (Debian's /usr/bin/prometheus) scrapes the metrics
// endpoint through the shipped scrape config; the test changes the job's
// world size as a failure would and reads the series back through
// Prometheus's HTTP API. Every PromQL query of the shipped dashboard is also
// evaluated by that server, so a syntax error in a panel fails here.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <thread>

#include "monitoring/metrics_exposer.h"
#include "monitoring/testing/child_process.h"
#include "monitoring/testing/http_get.h"
#include "monitoring/testing/runfiles.h"
#include "monitoring/training_metrics.h"

namespace elastic::monitoring {
namespace {

using nlohmann::json;
using testing::ChildProcess;
using testing::HttpGet;

constexpr char kPrometheus[] = "/usr/bin/prometheus";
// Generous: two cores shared by parallel builds; Prometheus starts in ~1 s idle.
constexpr double kWaitSeconds = 180;

// Replaces exactly one occurrence of `from`; fails the test when the shipped
// file no longer has it (the test would then not be testing that file).
void ReplaceOnce(std::string& text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << "shipped prometheus.yml has no '" << from << "'";
  text.replace(at, from.size(), to);
}

class PrometheusServer {
 public:
  // Starts Prometheus on a free loopback port, scraping `target` every second
  // with the shipped monitoring/prometheus.yml.
  void Start(const std::string& target) {
    std::string config = testing::ReadTextFile(testing::RunfilePath("monitoring/prometheus.yml"));
    ReplaceOnce(config, "localhost:9464", target);
    ReplaceOnce(config, "scrape_interval: 5s", "scrape_interval: 1s");
    const std::string dir = testing::TestTempDir() + "/prometheus";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string config_path = dir + "/prometheus.yml";
    std::ofstream(config_path) << config;

    port_ = testing::ReserveFreePort();
    process_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{kPrometheus, "--config.file=" + config_path,
                                 "--storage.tsdb.path=" + dir + "/tsdb",
                                 "--web.listen-address=127.0.0.1:" + std::to_string(port_)},
        dir + "/prometheus.log");
    WaitUntil("Prometheus is ready", [&] { return HttpGet(Url("/-/ready"), 5).status == 200; });
  }

  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

  // /api/v1/query: the reply's "data" on success, the error text otherwise.
  std::pair<std::optional<json>, std::string> Query(const std::string& promql) {
    const auto response = HttpGet(Url("/api/v1/query?query=" + testing::UrlEncode(promql)), 10);
    if (response.status == 0) return {std::nullopt, response.error};
    const json reply = json::parse(response.body, nullptr, /*allow_exceptions=*/false);
    if (reply.is_discarded()) return {std::nullopt, "not JSON: " + response.body};
    if (reply.value("status", "") != "success") {
      return {std::nullopt, reply.value("errorType", "") + ": " + reply.value("error", "")};
    }
    return {reply.at("data"), ""};
  }

  // The value of a query that yields exactly one sample; nullopt otherwise.
  std::optional<double> Scalar(const std::string& promql) {
    const auto [data, error] = Query(promql);
    if (!data || data->at("resultType") != "vector" || data->at("result").size() != 1) {
      return std::nullopt;
    }
    return std::stod(data->at("result")[0].at("value")[1].get<std::string>());
  }

  // Polls `done` every half second; fails the test with the server's log
  // when it does not hold within kWaitSeconds or Prometheus exits.
  void WaitUntil(const std::string& what, const std::function<bool()>& done) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(kWaitSeconds);
    while (!done()) {
      ASSERT_TRUE(process_->Running()) << "Prometheus exited (status " << process_->wait_status()
                                       << ") while waiting for " << what << "; log:\n"
                                       << process_->LogTail();
      ASSERT_LT(std::chrono::steady_clock::now(), deadline)
          << "gave up waiting for " << what << " after " << kWaitSeconds << " s; log:\n"
          << process_->LogTail();
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }

  // SIGTERM; returns the wait status.
  int Stop() {
    process_->Stop();
    return process_->wait_status();
  }

  std::string LogTail() const { return process_ ? process_->LogTail() : ""; }

 private:
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

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
  ASSERT_EQ(access(kPrometheus, X_OK), 0)
      << kPrometheus << " is missing: run tools/setup.sh (Debian package 'prometheus')";

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

  PrometheusServer prometheus;
  ASSERT_NO_FATAL_FAILURE(prometheus.Start("127.0.0.1:" + std::to_string(exposer.port())));

  ASSERT_NO_FATAL_FAILURE(prometheus.WaitUntil("the first scrape", [&] {
    return prometheus.Scalar("elastic_world_size{job=\"elastic\"}") == 4.0;
  }));
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

  ASSERT_NO_FATAL_FAILURE(prometheus.WaitUntil("the world size after the failure", [&] {
    return prometheus.Scalar("elastic_world_size") == 3.0 &&
           prometheus.Scalar("elastic_generation") == 2.0 &&
           prometheus.Scalar("elastic_test_accuracy_ratio") == 0.47;
  }));
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
    const auto [data, error] = prometheus.Query(query);
    EXPECT_TRUE(data.has_value()) << "dashboard query rejected: " << query << "\n" << error;
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
