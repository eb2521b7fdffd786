// The dashboard's queries filled in as Grafana fills them, and range-query
// results drawn as the panels' charts (the real Prometheus and job are in
// //tests:prometheus_job_test).
#include "monitoring/dashboard_render.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>

#include "monitoring/testing/runfiles.h"

namespace elastic::monitoring {
namespace {

using nlohmann::json;

json ShippedDashboard() {
  return json::parse(testing::ReadTextFile(
      testing::RunfilePath("monitoring/grafana/dashboards/elastic-training.json")));
}

// A range query's data: one series per (labels, values at t = 100, 101, ...).
json Matrix(const std::vector<std::pair<json, std::vector<std::string>>>& series) {
  json result = json::array();
  for (const auto& [metric, values] : series) {
    json points = json::array();
    for (size_t i = 0; i < values.size(); ++i) points.push_back({100.0 + i, values[i]});
    result.push_back({{"metric", metric}, {"values", points}});
  }
  return {{"resultType", "matrix"}, {"result", result}};
}

TEST(DashboardRenderTest, RateIntervalSpansFourScrapesAndAStep) {
  EXPECT_DOUBLE_EQ(RateIntervalSeconds({".*", 15, 5, 1800}), 20);   // step + scrape
  EXPECT_DOUBLE_EQ(RateIntervalSeconds({".*", 0.5, 0.25, 60}), 1);  // four scrapes
  EXPECT_EQ(PromDuration(1.25), "1250ms");
  EXPECT_EQ(PromDuration(0.0005), "1ms");
  EXPECT_THROW(PromDuration(0), std::invalid_argument);
}

TEST(DashboardRenderTest, ExpandsTheDashboardVariables) {
  const QueryVariables variables{"elastic", 2, 1, 600};
  EXPECT_EQ(ExpandQuery("sum(rate(x{job=~\"$job\"}[$__rate_interval]))", variables),
            "sum(rate(x{job=~\"elastic\"}[4000ms]))");
  EXPECT_EQ(ExpandQuery("avg_over_time(x{job=\"${job}\"}[$__range]) / $__interval", variables),
            "avg_over_time(x{job=\"elastic\"}[600000ms]) / 2000ms");
  // A variable the dashboard does not define is an error, not a query that
  // silently matches nothing; so is a longer name starting like a known one.
  EXPECT_THROW(ExpandQuery("x{instance=\"$instance\"}", variables), std::invalid_argument);
  EXPECT_THROW(ExpandQuery("x[$__interval_ms]", variables), std::invalid_argument);
  // Every query of the shipped dashboard expands completely.
  for (const DashboardPanel& panel : DashboardPanels(ShippedDashboard())) {
    for (const PanelTarget& target : panel.targets) {
      const std::string expanded = ExpandQuery(target.expr, variables);
      EXPECT_EQ(expanded.find('$'), std::string::npos) << panel.title << ": " << expanded;
    }
  }
}

TEST(DashboardRenderTest, FindsEveryPanelAndTheMembershipAnnotation) {
  const json dashboard = ShippedDashboard();
  const std::vector<DashboardPanel> panels = DashboardPanels(dashboard);
  ASSERT_EQ(panels.size(), dashboard.at("panels").size());
  std::set<std::string> files;
  for (const DashboardPanel& panel : panels) {
    EXPECT_FALSE(panel.targets.empty()) << panel.title;
    EXPECT_TRUE(files.insert(PanelFileName(panel)).second) << PanelFileName(panel);
  }
  EXPECT_EQ(PanelFileName(panels.at(6)), "07-throughput.svg");
  EXPECT_EQ(PanelFileName(panels.at(10)), "11-allreduce-latency-quantiles.svg");
  EXPECT_TRUE(panels.at(7).steps) << "world size over time is drawn as steps";
  EXPECT_TRUE(panels.at(9).fixed_y) << "accuracy is a ratio from 0 to 1";
  const std::vector<DashboardAnnotation> annotations = DashboardAnnotations(dashboard);
  ASSERT_EQ(annotations.size(), 1u);
  EXPECT_EQ(annotations[0].title_format, "{{reason}}");
}

TEST(DashboardRenderTest, LegendsUseTheSeriesLabels) {
  const json metric = {{"__name__", "x"}, {"reason", "join"}, {"job", "elastic"}};
  EXPECT_EQ(LegendText("worker {{reason}} / {{ job }}", metric), "worker join / elastic");
  EXPECT_EQ(LegendText("{{missing}}!", metric), "!");
  EXPECT_EQ(LegendText("", metric), "x{job=\"elastic\", reason=\"join\"}");
}

TEST(DashboardRenderTest, DrawsOneLinePerReturnedSeries) {
  DashboardPanel panel;
  panel.id = 15;
  panel.type = "timeseries";
  panel.title = "Step time per rank";
  panel.unit = "s";
  panel.targets = {{"A", "elastic_rank_step_duration_seconds", "rank {{rank}}"}};
  const json data = Matrix({{{{"rank", "0"}}, {"0.1", "0.2", "NaN"}}, {{{"rank", "1"}}, {"0.3"}}});
  const ChartSpec spec = PanelChart(panel, {data}, 100, 110);
  ASSERT_EQ(spec.series.size(), 2u);
  EXPECT_EQ(spec.series[0].name, "rank 0");
  EXPECT_EQ(spec.series[1].name, "rank 1");
  EXPECT_NE(spec.series[0].color, spec.series[1].color);
  EXPECT_EQ(spec.series[0].points.size(), 3u);
  EXPECT_DOUBLE_EQ(spec.series[0].points[1].first, 1);  // seconds since the start
  EXPECT_EQ(spec.y_label, "seconds");
  EXPECT_DOUBLE_EQ(spec.x_end, 10);
  EXPECT_EQ(FiniteSamples(MatrixSeries(data, 100)), 3u);
  const std::string svg = RenderChart(spec);
  EXPECT_NE(svg.find("data-series=\"rank 1\""), std::string::npos);
  EXPECT_EQ(svg.find("<circle"), std::string::npos) << "no dot per sample on a dashboard chart";

  // One result per query, or it is a caller's mistake.
  EXPECT_THROW(PanelChart(panel, {}, 100, 110), std::invalid_argument);
  EXPECT_THROW(MatrixSeries({{"resultType", "vector"}, {"result", json::array()}}, 0),
               std::invalid_argument);
}

TEST(DashboardRenderTest, AStatPanelShowsItsLastValue) {
  DashboardPanel panel;
  panel.type = "stat";
  panel.title = "Test accuracy";
  panel.unit = "percentunit";
  panel.targets = {{"A", "max(elastic_test_accuracy_ratio)", "Test accuracy"}};
  const ChartSpec spec =
      PanelChart(panel, {Matrix({{json::object(), {"0.5", "0.625", "NaN"}}})}, 100, 103);
  EXPECT_EQ(spec.title, "Test accuracy: 62.5 %");
}

TEST(DashboardRenderTest, AnnotationEventsAreRunsOfSamples) {
  const DashboardAnnotation annotation{"Membership changes", "...", "{{reason}}"};
  // Samples at 100, 101 (one event) and 105 (another), step 1 s.
  json data = Matrix({{{{"reason", "join"}}, {"1", "1"}}});
  data["result"][0]["values"].push_back({105.0, "1"});
  const std::vector<ChartMarker> markers = AnnotationMarkers(annotation, data, 100, 1);
  ASSERT_EQ(markers.size(), 2u);
  EXPECT_DOUBLE_EQ(markers[0].x, 0);
  EXPECT_DOUBLE_EQ(markers[1].x, 5);
  EXPECT_EQ(markers[1].label, "join");
}

}  // namespace
}  // namespace elastic::monitoring
