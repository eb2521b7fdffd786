// The Grafana dashboard's panels drawn without Grafana: each panel's PromQL,
// with the dashboard's variables filled in as Grafana fills them, is run as a
// Prometheus range query by the caller, and the results become one SVG chart
// per panel (svg_chart.h). Used by //tests:prometheus_job_test to check and
// draw every panel against a real job (docs/dashboard/*.svg).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "monitoring/svg_chart.h"

namespace elastic::monitoring {

// What Grafana substitutes into a query.
struct QueryVariables {
  std::string job = ".*";              // $job: "All" is the variable's allValue
  double interval_seconds = 15;        // $__interval: the range query's step
  double scrape_interval_seconds = 5;  // the data source's timeInterval
  double range_seconds = 1800;         // $__range: the dashboard's time range
};

// Grafana's $__rate_interval: max($__interval + scrape interval, 4 * scrape
// interval), so a rate() window always spans at least four scrapes.
double RateIntervalSeconds(const QueryVariables& variables);

// A duration as PromQL writes it, in whole milliseconds ("1250ms").
std::string PromDuration(double seconds);

// `expr` with $job / ${job}, $__rate_interval, $__interval and $__range
// replaced. Throws std::invalid_argument naming any other variable.
std::string ExpandQuery(const std::string& expr, const QueryVariables& variables);

struct PanelTarget {
  std::string ref_id;
  std::string expr;  // as written in the dashboard, variables unexpanded
  std::string legend_format;
};

struct DashboardPanel {
  int id = 0;
  std::string type;  // "stat", "timeseries"
  std::string title;
  std::string unit;      // fieldConfig.defaults.unit
  bool steps = false;    // drawn as steps (stepAfter lines, bars)
  bool fixed_y = false;  // min and max given
  double y_min = 0;
  double y_max = 1;
  std::vector<PanelTarget> targets;
};

// Every panel with queries, rows' nested panels included, in dashboard order.
std::vector<DashboardPanel> DashboardPanels(const nlohmann::json& dashboard);

// Each enabled annotation with a PromQL "expr" (the membership changes).
struct DashboardAnnotation {
  std::string name;
  std::string expr;
  std::string title_format;
};
std::vector<DashboardAnnotation> DashboardAnnotations(const nlohmann::json& dashboard);

// Grafana's legend text: "{{label}}" replaced by that label's value; an empty
// format gives the series' labels as {a="b", c="d"}.
std::string LegendText(const std::string& format, const nlohmann::json& metric);

// The samples of a range query's "matrix" result, as (seconds since `start`,
// value) per series. Throws std::invalid_argument when `data` is not a matrix.
struct QueriedSeries {
  nlohmann::json metric;
  std::vector<std::pair<double, double>> points;
};
std::vector<QueriedSeries> MatrixSeries(const nlohmann::json& data, double start);

// Number of samples with a finite value over all series.
size_t FiniteSamples(const std::vector<QueriedSeries>& series);

// One chart: `results[i]` answers `panel.targets[i]`; `markers` are the
// annotations' events. A stat panel's title carries its last value.
ChartSpec PanelChart(const DashboardPanel& panel, const std::vector<nlohmann::json>& results,
                     double start, double end, const std::vector<ChartMarker>& markers = {});

// A marker where each annotation series starts a run of samples (an event),
// titled by `title_format`.
std::vector<ChartMarker> AnnotationMarkers(const DashboardAnnotation& annotation,
                                           const nlohmann::json& result, double start,
                                           double step_seconds);

// "07-throughput.svg": the panel id, then the title in lower case, words
// joined by '-'.
std::string PanelFileName(const DashboardPanel& panel);

}  // namespace elastic::monitoring
