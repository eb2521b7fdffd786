// A real Prometheus server (Debian's /usr/bin/prometheus) scrapes a real
// elastic job of //trainer:cifar through the shipped scrape config while the
// job grows from 2 to 4 workers by --join. After the job, the test reads the
// stored series back through Prometheus's HTTP API and holds them to the
// job's event log: the world sizes of the epochs, the test accuracy of
// every epoch (the last one included: the driver waits for a final scrape),
// the joins, and the generations. Every query of the shipped Grafana dashboard
// is then asked of that Prometheus as the dashboard asks it (a range query
// over the job's life, variables filled in): each must return samples, and
// each panel is drawn to an SVG chart under $TEST_UNDECLARED_OUTPUTS_DIR/
// dashboard (what docs/dashboard/ holds; tools/render_dashboard_docs.sh).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "monitoring/dashboard_render.h"
#include "monitoring/testing/child_process.h"
#include "monitoring/testing/prometheus_server.h"
#include "monitoring/testing/runfiles.h"
#include "runtime/atomic_file.h"
#include "tests/job_checks.h"
#include "tests/process.h"

namespace {

using elastic::monitoring::testing::PrometheusServer;
using elastic::tests::FreshTempDir;
using elastic::tests::JobEvent;
using elastic::tests::JobEvents;
using elastic::tests::Process;
using elastic::tests::WaitForEvent;
using nlohmann::json;

constexpr char kBinary[] = "examples/cifar/cifar";
constexpr int kJoiningWorkers = 2;
// Long enough for any job of this test: range selectors see its whole life.
constexpr char kWholeRun[] = "[1h]";
// How often the test's Prometheus scrapes the job.
constexpr double kScrapeSeconds = 0.25;
// Samples per panel query across the job, as a Grafana panel about this many
// pixels wide asks for.
constexpr double kPointsPerPanel = 240;

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One epoch of the job, as its event log has it.
struct LoggedEpoch {
  int epoch = 0;
  int world = 0;
  double test_accuracy = 0;  // a ratio
};

std::vector<LoggedEpoch> LoggedEpochs(const JobEvents& events) {
  std::vector<LoggedEpoch> epochs;
  for (const JobEvent& e : events.Of("epoch")) {
    epochs.push_back(
        {e["epoch"].get<int>(), e["world"].get<int>(), e["test_metric"].get<double>()});
  }
  return epochs;
}

// The generations of the views the driver announced, in order.
std::vector<int> LoggedGenerations(const JobEvents& events) {
  std::vector<int> generations;
  for (const JobEvent& v : events.Of("view")) generations.push_back(v["generation"].get<int>());
  return generations;
}

// Every stored sample of one series, by timestamp in ms: a range selector
// evaluated as an instant query returns the raw scraped values.
std::map<int64_t, double> RawSeries(const PrometheusServer& prometheus,
                                    const std::string& selector) {
  const PrometheusServer::QueryResult result = prometheus.Query(selector + kWholeRun);
  std::map<int64_t, double> series;
  EXPECT_TRUE(result.data.has_value()) << selector << ": " << result.error;
  if (!result.data) return series;
  EXPECT_EQ(result.data->at("resultType"), "matrix") << *result.data;
  EXPECT_EQ(result.data->at("result").size(), 1u) << selector << ": " << *result.data;
  if (result.data->at("result").size() != 1) return series;
  for (const json& point : result.data->at("result")[0].at("values")) {
    const int64_t ms = static_cast<int64_t>(point[0].get<double>() * 1000 + 0.5);
    series[ms] = std::stod(point[1].get<std::string>());
  }
  return series;
}

// The world size of every view the driver announced, in order.
std::vector<double> LoggedGenerationWorlds(const JobEvents& events) {
  std::vector<double> worlds;
  for (const JobEvent& v : events.Of("view"))
    worlds.push_back(static_cast<double>(v["members"].size()));
  return worlds;
}

// Whether `part` is `whole` with some elements left out, the order kept.
bool IsSubsequence(const std::vector<double>& part, const std::vector<double>& whole) {
  size_t next = 0;
  for (double v : whole)
    if (next < part.size() && part[next] == v) ++next;
  return next == part.size();
}

// The values of `series` in order, each run of equal values once.
std::vector<double> DistinctRuns(const std::vector<double>& values) {
  std::vector<double> runs;
  for (double v : values)
    if (runs.empty() || runs.back() != v) runs.push_back(v);
  return runs;
}

// Asks `prometheus` every query of the shipped dashboard over [start, end] as
// Grafana would (job "All", $__rate_interval from the scrape interval), with
// the annotation's events as markers; each query must return finite samples.
// Draws each panel under $TEST_UNDECLARED_OUTPUTS_DIR/dashboard when set.
void CheckAndDrawTheDashboard(const PrometheusServer& prometheus, double start, double end) {
  namespace mon = elastic::monitoring;
  const json dashboard = json::parse(
      elastic::monitoring::testing::ReadTextFile(elastic::monitoring::testing::RunfilePath(
          "monitoring/grafana/dashboards/elastic-training.json")));
  const double step = std::max(kScrapeSeconds, (end - start) / kPointsPerPanel);
  const mon::QueryVariables variables{".*", step, kScrapeSeconds, end - start};
  // The query, expanded, or why it failed.
  const auto range = [&](const std::string& where, const std::string& expr) -> json {
    const std::string query = mon::ExpandQuery(expr, variables);
    const PrometheusServer::QueryResult result = prometheus.QueryRange(query, start, end, step);
    if (!result.data) {
      ADD_FAILURE() << where << ": Prometheus rejected " << query << ": " << result.error;
      return {{"resultType", "matrix"}, {"result", json::array()}};
    }
    EXPECT_GT(mon::FiniteSamples(mon::MatrixSeries(*result.data, start)), 0u)
        << where << ": no samples over the job for " << query << "\n"
        << result.data->dump().substr(0, 500);
    return *result.data;
  };

  std::vector<mon::ChartMarker> markers;
  for (const mon::DashboardAnnotation& annotation : mon::DashboardAnnotations(dashboard)) {
    const json result = range("annotation " + annotation.name, annotation.expr);
    const std::vector<mon::ChartMarker> events =
        mon::AnnotationMarkers(annotation, result, start, step);
    markers.insert(markers.end(), events.begin(), events.end());
  }
  EXPECT_FALSE(markers.empty()) << "the joins are not marked";

  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const std::string dir = outputs ? std::string(outputs) + "/dashboard" : "";
  if (!dir.empty()) std::filesystem::create_directories(dir);
  const std::vector<mon::DashboardPanel> panels = mon::DashboardPanels(dashboard);
  EXPECT_EQ(panels.size(), dashboard.at("panels").size());
  for (const mon::DashboardPanel& panel : panels) {
    std::vector<json> results;
    for (const mon::PanelTarget& target : panel.targets) {
      results.push_back(range("panel \"" + panel.title + "\" query " + target.ref_id, target.expr));
    }
    const mon::ChartSpec chart =
        mon::PanelChart(panel, results, start, end,
                        panel.type == "timeseries" ? markers : std::vector<mon::ChartMarker>{});
    if (!dir.empty()) {
      elastic::runtime::WriteFileAtomically(dir + "/" + mon::PanelFileName(panel),
                                            mon::RenderChart(chart));
    }
  }
  std::cout << "dashboard: " << panels.size() << " panels queried over " << end - start
            << " s at a " << step << " s step, " << markers.size() << " membership markers"
            << (dir.empty() ? "" : "; charts in " + dir) << std::endl;
}

TEST(PrometheusJobTest, PrometheusSeesTheJobGrowFromTwoToFourWorkers) {
  const std::string dir = FreshTempDir("job");
  // Prometheus first, scraping every 250 ms (an epoch here can take under 2 s:
  // every epoch's accuracy must be scraped) a port the driver will serve on:
  // it is ready before the job starts, so it sees the job's whole life.
  const int metrics_port = elastic::monitoring::testing::ReserveFreePort();
  PrometheusServer prometheus(
      elastic::monitoring::testing::ScrapeConfigFor(
          elastic::monitoring::testing::ReadTextFile(
              elastic::monitoring::testing::RunfilePath("monitoring/prometheus.yml")),
          "127.0.0.1:" + std::to_string(metrics_port), "250ms"),
      dir + "/prometheus");
  // Prometheus starts scraping a configured target only when its scrape
  // manager next applies targets (up to 5 s after it is ready), and a short
  // job's first epochs are over by then. Its first attempt records up == 0
  // (nothing listens yet): from then on it scrapes every 250 ms.
  prometheus.WaitUntil("the first scrape attempt",
                       [&] { return prometheus.Scalar("up{job=\"elastic\"}").has_value(); });

  const double job_start = UnixNow();
  const std::string run_dir = dir + "/run";
  // Up to 30 epochs: the test stops the job (SIGTERM to the driver) one epoch
  // after the joiners took effect, however long they took to start.
  Process driver({kBinary, "--workers=2", "--model=resnet8", "--dataset=fashion-mnist",
                  "--train-samples=2048", "--test-samples=1000", "--epochs=30", "--batch-size=32",
                  "--lr=0.05", "--warmup-epochs=0", "--seed=1", "--loader-threads=1",
                  "--log-every=1", "--metrics-port=" + std::to_string(metrics_port),
                  "--token-file=" + dir + "/token", "--run-dir=" + run_dir},
                 dir + "/driver.log");
  const JobEvent start = WaitForEvent(run_dir, std::chrono::seconds(120),
                                      [](const JobEvent& e) { return e["event"] == "start"; });
  ASSERT_FALSE(start.is_null()) << driver.Output();
  const std::string head = start["head"].get<std::string>();
  // The joiners start once epoch 1 ended at world 2: they enter at the next
  // commit, so started earlier they may enter within epoch 1 on a fast machine.
  const JobEvent first = WaitForEvent(run_dir, std::chrono::seconds(300), [](const JobEvent& e) {
    return e["event"] == "epoch" && e["epoch"] == 1 && e["epochs"] == 30 && e["world"] == 2;
  });
  ASSERT_FALSE(first.is_null()) << JobEvents::Read(run_dir).Text() << driver.Output();
  // The first world must be in Prometheus before it changes: a fast first
  // epoch can end before a 1 s scrape interval came round twice.
  for (int i = 0; i < 600; ++i) {
    const std::optional<double> scraped = prometheus.Scalar("max(elastic_generation)");
    if (scraped && *scraped >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Process joiner({kBinary, "--join=" + head, "--workers=" + std::to_string(kJoiningWorkers),
                  "--token-file=" + dir + "/token"},
                 dir + "/join.log");
  ASSERT_TRUE(elastic::tests::StopAfterAnEpochWithWorld(driver, run_dir, 2 + kJoiningWorkers,
                                                        std::chrono::seconds(400)))
      << driver.Output() << joiner.Output();
  ASSERT_EQ(driver.Wait(std::chrono::seconds(300)), 3) << driver.Output();
  EXPECT_EQ(joiner.Wait(std::chrono::seconds(120)), 0) << joiner.Output();
  const double job_end = UnixNow();
  // First, so the charts are drawn even when a check below stops the test.
  CheckAndDrawTheDashboard(prometheus, job_start, job_end);

  // What the driver logged.
  const JobEvents events = JobEvents::Read(run_dir);
  const std::string output = events.Text();
  const std::vector<LoggedEpoch> epochs = LoggedEpochs(events);
  ASSERT_GE(epochs.size(), 2u) << output;
  std::vector<double> logged_worlds, logged_accuracies;
  for (const LoggedEpoch& e : epochs) {
    logged_worlds.push_back(e.world);
    logged_accuracies.push_back(e.test_accuracy);
  }
  // The joiners enter at commits, together or one by one: a world between
  // may last less than an epoch and appear in no epoch summary.
  ASSERT_EQ(logged_worlds.front(), 2) << output;
  ASSERT_EQ(logged_worlds.back(), 2 + kJoiningWorkers) << output;
  const std::vector<int> generations = LoggedGenerations(events);
  ASSERT_GE(generations.size(), 2u) << output;

  // What Prometheus stored. The target was up.
  EXPECT_EQ(prometheus.Scalar(std::string("max_over_time(up{job=\"elastic\"}") + kWholeRun + ")"),
            1.0)
      << prometheus.LogTail();

  // World size: the values of the scrapes taken once a generation was in
  // force (before the first one the gauge reads 0: no world yet) went through
  // the world sizes of the logged epochs, in the same order, and only
  // through worlds of views the driver announced (one that lasted less
  // than a scrape interval may be missed).
  const std::map<int64_t, double> world = RawSeries(prometheus, "elastic_world_size");
  const std::map<int64_t, double> generation = RawSeries(prometheus, "elastic_generation");
  std::vector<double> scraped_worlds;
  for (const auto& [ms, value] : world) {
    const auto g = generation.find(ms);  // the same scrape stored both
    ASSERT_NE(g, generation.end()) << "no generation sample at " << ms;
    if (g->second != 0) scraped_worlds.push_back(value);
  }
  const std::vector<double> scraped_runs = DistinctRuns(scraped_worlds);
  const std::vector<double> generation_runs = DistinctRuns(LoggedGenerationWorlds(events));
  ASSERT_FALSE(scraped_runs.empty()) << output;
  EXPECT_EQ(scraped_runs.front(), logged_worlds.front()) << json(scraped_runs);
  EXPECT_EQ(scraped_runs.back(), logged_worlds.back()) << json(scraped_runs);
  EXPECT_TRUE(IsSubsequence(DistinctRuns(logged_worlds), scraped_runs))
      << "scraped " << json(scraped_runs) << "\n"
      << output;
  EXPECT_TRUE(IsSubsequence(scraped_runs, generation_runs))
      << "scraped " << json(scraped_runs) << ", generations " << json(generation_runs) << "\n"
      << output;

  // Generation: went up, to the last one the driver announced.
  std::vector<double> generations_in_order;
  for (const auto& [ms, value] : generation)
    if (value > 0) generations_in_order.push_back(value);
  ASSERT_FALSE(generations_in_order.empty());
  EXPECT_TRUE(std::is_sorted(generations_in_order.begin(), generations_in_order.end()));
  EXPECT_EQ(generations_in_order.front(), generations.front()) << output;
  EXPECT_EQ(generations_in_order.back(), generations.back()) << output;
  EXPECT_GT(generations_in_order.back(), generations_in_order.front());

  // Test accuracy: one value per epoch, in the order logged (0 until the
  // first evaluation), and the last stored value is the last logged one.
  // The event and the gauge carry the same number.
  std::vector<double> scraped_accuracies;
  for (const auto& [ms, value] : RawSeries(prometheus, "elastic_test_accuracy_ratio"))
    if (value != 0 || !scraped_accuracies.empty()) scraped_accuracies.push_back(value);
  const std::vector<double> accuracy_runs = DistinctRuns(scraped_accuracies);
  ASSERT_EQ(accuracy_runs.size(), DistinctRuns(logged_accuracies).size())
      << "scraped " << json(accuracy_runs) << ", logged " << json(logged_accuracies);
  for (size_t i = 0; i < accuracy_runs.size(); ++i)
    EXPECT_NEAR(accuracy_runs[i], DistinctRuns(logged_accuracies)[i], 1e-9) << "epoch " << i + 1;
  const std::optional<double> last_accuracy = prometheus.Scalar(
      std::string("last_over_time(elastic_test_accuracy_ratio") + kWholeRun + ")");
  ASSERT_TRUE(last_accuracy.has_value());
  EXPECT_NEAR(*last_accuracy, epochs.back().test_accuracy, 1e-9)
      << "Prometheus missed the final epoch's accuracy";

  std::cout << "logged worlds " << json(logged_worlds) << ", test accuracies "
            << json(logged_accuracies) << "\nscraped (" << world.size() << " scrapes) worlds "
            << json(DistinctRuns(scraped_worlds)) << ", generations "
            << json(DistinctRuns(generations_in_order)) << ", test accuracies "
            << json(accuracy_runs) << std::endl;

  // Membership changes: the two joiners, and nothing else happened.
  const auto changes = [&](const std::string& reason) {
    return prometheus.Scalar("last_over_time(elastic_membership_changes_total{reason=\"" + reason +
                             "\"}" + kWholeRun + ")");
  };
  EXPECT_EQ(changes("join"), static_cast<double>(kJoiningWorkers)) << output;
  EXPECT_EQ(changes("leave"), 0.0) << output;
  EXPECT_EQ(changes("failure"), 0.0) << output;
}

}  // namespace
