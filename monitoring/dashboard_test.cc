// The shipped Grafana dashboard reads only metrics the endpoint exports, and
// every exported metric is on it. Its PromQL is scanned for metric names and
// checked against a real scrape.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "monitoring/metrics_exposer.h"
#include "monitoring/testing/exposition.h"
#include "monitoring/testing/http_get.h"
#include "monitoring/testing/promql.h"
#include "monitoring/testing/runfiles.h"
#include "monitoring/training_metrics.h"

namespace elastic::monitoring {
namespace {

using nlohmann::json;
using testing::ReadTextFile;
using testing::RunfilePath;

constexpr char kDashboard[] = "monitoring/grafana/dashboards/elastic-training.json";

json LoadDashboard() { return json::parse(ReadTextFile(RunfilePath(kDashboard))); }

// Every "expr" anywhere in the dashboard: panel targets, rows' nested panels,
// annotation queries.
void CollectExprs(const json& node, const std::string& where,
                  std::vector<std::pair<std::string, std::string>>& out) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if (key == "expr" && value.is_string()) {
        out.emplace_back(where, value.get<std::string>());
      } else {
        const std::string here = node.contains("title")
                                     ? node["title"].get<std::string>()
                                     : (node.contains("name") && node["name"].is_string()
                                            ? node["name"].get<std::string>()
                                            : where);
        CollectExprs(value, here, out);
      }
    }
  } else if (node.is_array()) {
    for (const json& item : node) CollectExprs(item, where, out);
  }
}

// Histograms are referenced by their series names (_bucket, _sum, _count).
std::string FamilyOf(const std::string& sample, const testing::Exposition& e) {
  for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
    if (sample.size() > suffix.size() &&
        sample.compare(sample.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string base = sample.substr(0, sample.size() - suffix.size());
      if (e.types.count(base) && e.types.at(base) == "histogram") return base;
    }
  }
  return sample;
}

// What a job exports once every method has been called.
testing::Exposition ScrapeAJob() {
  TrainingMetrics metrics;
  MetricsOptions options;
  options.port = 0;
  MetricsExposer exposer(options);
  exposer.Serve(metrics.registry());
  metrics.SetImagesPerSecond(1900);
  metrics.SetTrainLoss(0.7);
  metrics.SetTrainAccuracy(0.75);
  metrics.SetTestAccuracy(0.7);
  metrics.SetLearningRate(0.1);
  metrics.SetEpoch(2);
  metrics.SetStep(300);
  metrics.AddSamplesProcessed(128);
  metrics.SetWorldSize(2);
  metrics.SetGeneration(1);
  metrics.RecordMembershipChange(MembershipChangeReason::kJoin, 2);
  metrics.ObserveRescaleDuration(0.4);
  metrics.ObserveAllreduce(0.002, 4096);
  metrics.SetRankStepTime(0, 0.1);
  metrics.SetRankStepTime(1, 0.11);
  metrics.SetRankShare(0, 85, 1200);
  metrics.SetRankShare(1, 43, 600);
  metrics.AddRuntimeMessages(12);
  metrics.AddHeartbeatMisses(1);
  const testing::HttpResponse response = testing::HttpGet(exposer.url());
  EXPECT_EQ(response.status, 200) << response.error;
  return testing::ParseExposition(response.body);
}

TEST(DashboardTest, EveryPanelQueryReadsExportedMetricsAndEveryMetricIsShown) {
  const json dashboard = LoadDashboard();
  std::vector<std::pair<std::string, std::string>> exprs;
  CollectExprs(dashboard, "dashboard", exprs);
  ASSERT_GE(exprs.size(), 20u);

  const testing::Exposition scraped = ScrapeAJob();
  std::set<std::string> shown;
  for (const auto& [where, expr] : exprs) {
    const std::set<std::string> names = testing::MetricNamesInPromQL(expr);
    EXPECT_FALSE(names.empty()) << where << ": no metric in '" << expr << "'";
    for (const std::string& name : names) {
      EXPECT_TRUE(scraped.HasSample(name))
          << where << ": '" << expr << "' reads " << name << ", which the endpoint does not export";
      shown.insert(FamilyOf(name, scraped));
    }
  }
  // The job-picker variable's query is Grafana's label_values(METRIC, LABEL).
  for (const json& variable : dashboard.at("templating").at("list")) {
    const std::string query = variable.at("query").at("query").get<std::string>();
    std::smatch match;
    ASSERT_TRUE(std::regex_match(query, match, std::regex(R"(label_values\((\w+), *(\w+)\))")))
        << query;
    EXPECT_TRUE(scraped.HasSample(match[1].str())) << query;
  }
  for (const auto& [family, type] : scraped.types) {
    // prometheus-cpp adds exposer_* metrics about the endpoint itself.
    if (family.rfind("elastic_", 0) != 0) continue;
    EXPECT_TRUE(shown.count(family)) << family << " is exported but no panel shows it";
  }
}

TEST(DashboardTest, HasThePanelsOperatorsLookFor) {
  const json dashboard = LoadDashboard();
  std::map<std::string, std::string> exprs_by_title;
  std::set<int> ids;
  for (const json& panel : dashboard.at("panels")) {
    EXPECT_TRUE(ids.insert(panel.at("id").get<int>()).second) << "duplicate id " << panel["id"];
    std::string all;
    for (const json& target : panel.at("targets"))
      all += target.at("expr").get<std::string>() + "\n";
    exprs_by_title[panel.at("title").get<std::string>()] = all;
  }
  const std::vector<std::pair<std::string, std::string>> required = {
      {"Throughput", "elastic_train_images_per_second"},
      {"Throughput", "elastic_train_tokens_per_second"},
      {"Loss", "elastic_train_loss"},
      {"Loss", "elastic_test_loss"},
      {"Accuracy", "elastic_test_accuracy_ratio"},
      {"World size over time", "elastic_world_size"},
      {"Allreduce latency quantiles", "histogram_quantile(0.99"},
      {"Rescale durations", "elastic_rescale_duration_seconds"},
      {"Share of a step per rank", "elastic_rank_share_samples"},
      {"Speed per rank", "elastic_rank_speed_samples_per_second"},
  };
  for (const auto& [title, needle] : required) {
    ASSERT_TRUE(exprs_by_title.count(title)) << "no panel '" << title << "'";
    EXPECT_NE(exprs_by_title[title].find(needle), std::string::npos) << title;
  }
  // Membership changes are annotations, so they mark every time series panel.
  bool annotated = false;
  for (const json& annotation : dashboard.at("annotations").at("list")) {
    annotated =
        annotated || (annotation.value("enable", false) &&
                      annotation.value("expr", "").find("elastic_membership_changes_total") !=
                          std::string::npos);
  }
  EXPECT_TRUE(annotated) << "no enabled annotation on membership changes";
}

TEST(DashboardTest, PanelsUseTheProvisionedDataSourceAndDoNotOverlap) {
  const std::string datasources =
      ReadTextFile(RunfilePath("monitoring/grafana/provisioning/datasources/prometheus.yml"));
  std::smatch match;
  ASSERT_TRUE(std::regex_search(datasources, match, std::regex(R"(\buid: *([\w-]+))")));
  const std::string uid = match[1].str();

  const json dashboard = LoadDashboard();
  std::vector<std::array<int, 4>> boxes;
  for (const json& panel : dashboard.at("panels")) {
    const std::string title = panel.at("title").get<std::string>();
    EXPECT_EQ(panel.at("datasource").at("uid").get<std::string>(), uid) << title;
    for (const json& target : panel.at("targets")) {
      EXPECT_EQ(target.at("datasource").at("uid").get<std::string>(), uid) << title;
    }
    const json& g = panel.at("gridPos");
    const std::array<int, 4> box = {g.at("x").get<int>(), g.at("y").get<int>(),
                                    g.at("w").get<int>(), g.at("h").get<int>()};
    EXPECT_LE(box[0] + box[2], 24) << title << " is wider than the grid";
    for (const auto& other : boxes) {
      const bool apart = box[0] + box[2] <= other[0] || other[0] + other[2] <= box[0] ||
                         box[1] + box[3] <= other[1] || other[1] + other[3] <= box[1];
      EXPECT_TRUE(apart) << title << " overlaps another panel";
    }
    boxes.push_back(box);
  }

  // The provider loads the directory docker-compose.yml mounts the JSON into.
  const std::string provider =
      ReadTextFile(RunfilePath("monitoring/grafana/provisioning/dashboards/elastic.yml"));
  ASSERT_TRUE(std::regex_search(provider, match, std::regex(R"(path: *(\S+))")));
  const std::string compose = ReadTextFile(RunfilePath("monitoring/docker-compose.yml"));
  EXPECT_NE(compose.find("./grafana/dashboards:" + match[1].str()), std::string::npos)
      << "docker-compose.yml does not mount the dashboards at " << match[1].str();
}

}  // namespace
}  // namespace elastic::monitoring
