#include "monitoring/dashboard_render.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <regex>
#include <stdexcept>

namespace elastic::monitoring {

using nlohmann::json;

namespace {

// Grafana's classic palette, in its order.
constexpr const char* kPalette[] = {"#73bf69", "#f2cc0c", "#5794f2", "#ff9830",
                                    "#f2495c", "#b877d9", "#70dbed", "#fade2a"};
constexpr char kMarkerColor[] = "#e02f44";

std::string Printf(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

// What the y axis says for a Grafana unit.
std::string UnitLabel(const std::string& unit) {
  if (unit == "s") return "seconds";
  if (unit == "Bps") return "bytes/s";
  if (unit == "percentunit") return "ratio";
  if (unit == "none" || unit == "short") return "";
  return unit;
}

// A stat panel's value as its unit shows it.
std::string ValueWithUnit(double value, const std::string& unit) {
  if (unit == "percentunit") return Printf("%.1f %%", value * 100);
  if (unit == "s") return Printf("%.3g s", value);
  return Printf("%.6g", value);
}

void CollectPanels(const json& panels, std::vector<DashboardPanel>& out) {
  for (const json& panel : panels) {
    if (panel.value("type", "") == "row") {
      CollectPanels(panel.value("panels", json::array()), out);
      continue;
    }
    if (!panel.contains("targets") || panel.at("targets").empty()) continue;
    DashboardPanel p;
    p.id = panel.at("id").get<int>();
    p.type = panel.at("type").get<std::string>();
    p.title = panel.value("title", "");
    const json defaults =
        panel.value("fieldConfig", json::object()).value("defaults", json::object());
    p.unit = defaults.value("unit", "");
    const json custom = defaults.value("custom", json::object());
    p.steps = custom.value("drawStyle", "") == "bars" ||
              custom.value("lineInterpolation", "").rfind("step", 0) == 0;
    if (defaults.contains("min") && defaults.contains("max")) {
      p.fixed_y = true;
      p.y_min = defaults.at("min").get<double>();
      p.y_max = defaults.at("max").get<double>();
    }
    for (const json& target : panel.at("targets")) {
      if (target.value("hide", false)) continue;
      p.targets.push_back({target.value("refId", ""), target.at("expr").get<std::string>(),
                           target.value("legendFormat", "")});
    }
    out.push_back(std::move(p));
  }
}

}  // namespace

double RateIntervalSeconds(const QueryVariables& variables) {
  return std::max(variables.interval_seconds + variables.scrape_interval_seconds,
                  4 * variables.scrape_interval_seconds);
}

std::string PromDuration(double seconds) {
  if (!(seconds > 0))
    throw std::invalid_argument("not a positive duration: " + Printf("%g", seconds));
  return std::to_string(static_cast<long long>(std::ceil(seconds * 1000 - 1e-6))) + "ms";
}

std::string ExpandQuery(const std::string& expr, const QueryVariables& variables) {
  const std::vector<std::pair<std::string, std::string>> values = {
      {"__rate_interval", PromDuration(RateIntervalSeconds(variables))},
      {"__interval", PromDuration(variables.interval_seconds)},
      {"__range", PromDuration(variables.range_seconds)},
      {"job", variables.job},
  };
  // $name or ${name}; names are matched whole, so $__interval does not eat
  // the start of $__interval_ms.
  static const std::regex kVariable(R"(\$\{(\w+)\}|\$(\w+))");
  std::string out;
  auto last = expr.cbegin();
  for (std::sregex_iterator it(expr.begin(), expr.end(), kVariable), end; it != end; ++it) {
    const std::string name = (*it)[1].matched ? (*it)[1].str() : (*it)[2].str();
    const auto value = std::find_if(values.begin(), values.end(),
                                    [&](const auto& entry) { return entry.first == name; });
    if (value == values.end()) {
      throw std::invalid_argument("unknown dashboard variable $" + name + " in: " + expr);
    }
    out.append(last, it->prefix().second);
    out += value->second;
    last = (*it)[0].second;
  }
  out.append(last, expr.cend());
  return out;
}

std::vector<DashboardPanel> DashboardPanels(const json& dashboard) {
  std::vector<DashboardPanel> panels;
  CollectPanels(dashboard.value("panels", json::array()), panels);
  return panels;
}

std::vector<DashboardAnnotation> DashboardAnnotations(const json& dashboard) {
  std::vector<DashboardAnnotation> out;
  const json list = dashboard.value("annotations", json::object()).value("list", json::array());
  for (const json& annotation : list) {
    if (!annotation.value("enable", false) || !annotation.contains("expr")) continue;
    out.push_back({annotation.value("name", ""), annotation.at("expr").get<std::string>(),
                   annotation.value("titleFormat", "")});
  }
  return out;
}

std::string LegendText(const std::string& format, const json& metric) {
  if (format.empty()) {
    std::string text = metric.value("__name__", "") + "{";
    bool first = true;
    for (const auto& [label, value] : metric.items()) {
      if (label == "__name__") continue;
      text += (first ? "" : ", ") + label + "=\"" + value.get<std::string>() + "\"";
      first = false;
    }
    return text + "}";
  }
  static const std::regex kLabel(R"(\{\{\s*(\w+)\s*\}\})");
  std::string out;
  auto last = format.cbegin();
  for (std::sregex_iterator it(format.begin(), format.end(), kLabel), end; it != end; ++it) {
    out.append(last, it->prefix().second);
    out += metric.value((*it)[1].str(), "");
    last = (*it)[0].second;
  }
  out.append(last, format.cend());
  return out;
}

std::vector<QueriedSeries> MatrixSeries(const json& data, double start) {
  if (!data.is_object() || data.value("resultType", "") != "matrix") {
    throw std::invalid_argument("not a range query's matrix: " + data.dump().substr(0, 200));
  }
  std::vector<QueriedSeries> out;
  for (const json& series : data.at("result")) {
    QueriedSeries s;
    s.metric = series.value("metric", json::object());
    for (const json& point : series.at("values")) {
      // Prometheus writes values as strings: "NaN" and "+Inf" included.
      s.points.emplace_back(point.at(0).get<double>() - start,
                            std::stod(point.at(1).get<std::string>()));
    }
    out.push_back(std::move(s));
  }
  return out;
}

size_t FiniteSamples(const std::vector<QueriedSeries>& series) {
  size_t n = 0;
  for (const QueriedSeries& s : series)
    for (const auto& point : s.points) n += std::isfinite(point.second) ? 1 : 0;
  return n;
}

ChartSpec PanelChart(const DashboardPanel& panel, const std::vector<json>& results, double start,
                     double end, const std::vector<ChartMarker>& markers) {
  if (results.size() != panel.targets.size()) {
    throw std::invalid_argument("panel \"" + panel.title + "\": " + std::to_string(results.size()) +
                                " results for " + std::to_string(panel.targets.size()) +
                                " queries");
  }
  ChartSpec spec;
  spec.title = panel.title;
  spec.x_label = "seconds since the start";
  spec.y_label = UnitLabel(panel.unit);
  spec.x_end = end - start;
  spec.fixed_y = panel.fixed_y;
  spec.y_min = panel.y_min;
  spec.y_max = panel.y_max;
  spec.markers = markers;
  double last_value = std::nan("");
  double last_x = -INFINITY;
  for (size_t i = 0; i < results.size(); ++i) {
    for (QueriedSeries& series : MatrixSeries(results[i], start)) {
      ChartSeries chart;
      chart.name = LegendText(panel.targets[i].legend_format, series.metric);
      chart.color = kPalette[spec.series.size() % std::size(kPalette)];
      chart.step = panel.steps;
      chart.dots = false;
      for (const auto& [x, y] : series.points) {
        if (std::isfinite(y) && x >= last_x) {
          last_x = x;
          last_value = y;
        }
      }
      chart.points = std::move(series.points);
      spec.series.push_back(std::move(chart));
    }
  }
  if (panel.type == "stat" && std::isfinite(last_value)) {
    spec.title += ": " + ValueWithUnit(last_value, panel.unit);
  }
  return spec;
}

std::vector<ChartMarker> AnnotationMarkers(const DashboardAnnotation& annotation,
                                           const json& result, double start, double step_seconds) {
  std::vector<ChartMarker> markers;
  for (const QueriedSeries& series : MatrixSeries(result, start)) {
    const std::string label = LegendText(annotation.title_format, series.metric);
    double previous = -INFINITY;
    for (const auto& [x, y] : series.points) {
      // Consecutive steps are one event; a gap starts the next.
      if (x - previous > step_seconds * 1.5) markers.push_back({x, label, kMarkerColor});
      previous = x;
    }
  }
  std::sort(markers.begin(), markers.end(),
            [](const ChartMarker& a, const ChartMarker& b) { return a.x < b.x; });
  return markers;
}

std::string PanelFileName(const DashboardPanel& panel) {
  std::string slug;
  for (char c : panel.title) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      slug += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!slug.empty() && slug.back() != '-') {
      slug += '-';
    }
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  char id[16];
  std::snprintf(id, sizeof(id), "%02d", panel.id);
  return std::string(id) + "-" + slug + ".svg";
}

}  // namespace elastic::monitoring
