#include "monitoring/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <system_error>

#include "monitoring/svg_chart.h"

namespace elastic::monitoring {

namespace {

// Colours that stay apart for the colour-blind (Okabe-Ito).
constexpr char kBlue[] = "#0072B2";
constexpr char kOrange[] = "#E69F00";
constexpr char kGreen[] = "#009E73";
constexpr char kRed[] = "#D55E00";
constexpr char kPurple[] = "#CC79A7";

const char* ReasonColor(MembershipChangeReason reason) {
  switch (reason) {
    case MembershipChangeReason::kJoin:
      return kGreen;
    case MembershipChangeReason::kLeave:
      return kOrange;
    case MembershipChangeReason::kFailure:
      return kRed;
  }
  return kPurple;
}

std::string Format(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

std::string Percent(double fraction) {
  return std::isfinite(fraction) ? Format("%.2f%%", 100 * fraction) : "n/a";
}

std::string Duration(double seconds) {
  const int64_t whole = static_cast<int64_t>(seconds);
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%lld:%02lld:%02lld (%.1f s)",
                static_cast<long long>(whole / 3600), static_cast<long long>(whole / 60 % 60),
                static_cast<long long>(whole % 60), seconds);
  return buffer;
}

ChartSeries EpochSeries(const RunSeries& run, const std::string& name, const char* color,
                        double scale, double EpochRecord::*field) {
  ChartSeries series{name, color, {}, false};
  for (const EpochRecord& e : run.epochs) {
    series.points.emplace_back(static_cast<double>(e.epoch), scale * (e.*field));
  }
  return series;
}

std::string LossChart(const RunSeries& run) {
  ChartSpec spec;
  spec.title = "Training loss";
  spec.x_label = "epoch";
  spec.y_label = "loss";
  spec.series.push_back(EpochSeries(run, "train loss", kBlue, 1, &EpochRecord::train_loss));
  return RenderChart(spec);
}

std::string AccuracyChart(const RunSeries& run) {
  ChartSpec spec;
  spec.title = "Accuracy";
  spec.x_label = "epoch";
  spec.y_label = "accuracy (%)";
  spec.fixed_y = true;
  spec.y_min = 0;
  spec.y_max = 100;
  spec.series.push_back(
      EpochSeries(run, "train accuracy", kBlue, 100, &EpochRecord::train_accuracy));
  spec.series.push_back(
      EpochSeries(run, "test accuracy", kOrange, 100, &EpochRecord::test_accuracy));
  return RenderChart(spec);
}

// A language model's run counts tokens.
bool CountsTokens(const RunSeries& run) {
  return std::any_of(run.epochs.begin(), run.epochs.end(),
                     [](const EpochRecord& e) { return e.tokens_per_second > 0; });
}

std::string ThroughputChart(const RunSeries& run) {
  ChartSpec spec;
  spec.title = "Throughput (whole world)";
  spec.x_label = "epoch";
  if (CountsTokens(run)) {
    spec.y_label = "tokens / s";
    spec.series.push_back(
        EpochSeries(run, "tokens per second", kGreen, 1, &EpochRecord::tokens_per_second));
  } else {
    spec.y_label = "images / s";
    spec.series.push_back(
        EpochSeries(run, "images per second", kGreen, 1, &EpochRecord::images_per_second));
  }
  return RenderChart(spec);
}

std::string WorldSizeChart(const RunSeries& run) {
  ChartSpec spec;
  spec.title = "World size";
  spec.x_label = "time since start (s)";
  spec.y_label = "workers";
  spec.x_end = run.duration_seconds;
  ChartSeries workers{"workers", kBlue, {}, true};
  int64_t most = 0;
  for (const WorldSizeChange& change : run.world) {
    workers.points.emplace_back(change.seconds, static_cast<double>(change.world_size));
    most = std::max(most, change.world_size);
    if (change.reason) {
      spec.markers.push_back(
          {change.seconds, ReasonName(*change.reason), ReasonColor(*change.reason)});
    }
  }
  spec.series.push_back(std::move(workers));
  // Whole workers from zero: a drop from 4 to 3 should look like a quarter.
  spec.fixed_y = true;
  spec.y_min = 0;
  spec.y_max = static_cast<double>(std::max<int64_t>(most + 1, 2));
  return RenderChart(spec);
}

void SummaryTable(std::ostringstream& html, const RunSeries& run, const RunReportOptions& options) {
  std::vector<std::pair<std::string, std::string>> rows = options.details;
  rows.emplace_back("duration", Duration(run.duration_seconds));
  rows.emplace_back("epochs", std::to_string(run.epochs.size()));
  if (!run.epochs.empty()) {
    const EpochRecord& last = run.epochs.back();
    rows.emplace_back("final train loss", Format("%.4f", last.train_loss));
    rows.emplace_back("final train accuracy", Percent(last.train_accuracy));
    rows.emplace_back("final test accuracy", Percent(last.test_accuracy));
    const EpochRecord* best = nullptr;
    double throughput = 0;
    for (const EpochRecord& e : run.epochs) {
      if (std::isfinite(e.test_accuracy) && (!best || e.test_accuracy > best->test_accuracy)) {
        best = &e;
      }
      throughput += CountsTokens(run) ? e.tokens_per_second : e.images_per_second;
    }
    if (best) {
      rows.emplace_back("best test accuracy", Percent(best->test_accuracy) + " (epoch " +
                                                  std::to_string(best->epoch) + ")");
    }
    rows.emplace_back("mean throughput",
                      Format(CountsTokens(run) ? "%.1f tokens/s" : "%.1f images/s",
                             throughput / static_cast<double>(run.epochs.size())));
  }
  if (!run.world.empty()) {
    int64_t lo = run.world.front().world_size, hi = lo;
    std::map<std::string, int> reasons;
    for (const WorldSizeChange& w : run.world) {
      lo = std::min(lo, w.world_size);
      hi = std::max(hi, w.world_size);
      if (w.reason) ++reasons[ReasonName(*w.reason)];
    }
    rows.emplace_back("world size", lo == hi ? std::to_string(lo)
                                             : std::to_string(lo) + " to " + std::to_string(hi));
    std::string changes = reasons.empty() ? "none" : "";
    for (const auto& [reason, count] : reasons) {
      changes += (changes.empty() ? "" : ", ") + std::to_string(count) + " " + reason;
    }
    rows.emplace_back("membership changes", changes);
  }
  html << "<table class=\"summary\">\n";
  for (const auto& [key, value] : rows) {
    html << "<tr><th>" << EscapeXml(key) << "</th><td>" << EscapeXml(value) << "</td></tr>\n";
  }
  html << "</table>\n";
}

void EventTable(std::ostringstream& html, const RunSeries& run) {
  if (run.world.empty()) return;
  html << "<h2>Membership</h2>\n<table class=\"events\">\n"
       << "<tr><th>time (s)</th><th>event</th><th>workers</th><th>generation</th></tr>\n";
  for (const WorldSizeChange& w : run.world) {
    html << "<tr><td>" << Format("%.1f", w.seconds) << "</td><td>"
         << (w.reason ? ReasonName(*w.reason) : "start") << "</td><td>" << w.world_size
         << "</td><td>" << w.generation << "</td></tr>\n";
  }
  html << "</table>\n";
}

void SharesTable(std::ostringstream& html, const RunSeries& run) {
  if (run.shares.empty()) return;
  html << "<h2>Shares sized by speed</h2>\n<table class=\"events\">\n"
       << "<tr><th>time (s)</th><th>generation</th><th>samples of a step by worker (times "
          "slower than the median)</th></tr>\n";
  for (const ShareChange& change : run.shares) {
    std::string split;
    for (const ShareChange::Worker& w : change.workers) {
      split += (split.empty() ? "" : ", ") + std::string("worker ") + std::to_string(w.member) +
               ": " + std::to_string(w.share) + Format(" (%.1fx)", w.slowdown);
    }
    html << "<tr><td>" << Format("%.1f", change.seconds) << "</td><td>" << change.generation
         << "</td><td>" << EscapeXml(split) << " of " << change.step_samples << "</td></tr>\n";
  }
  html << "</table>\n";
}

constexpr char kStyle[] = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px auto; max-width: 760px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { text-align: left; padding: 2px 14px 2px 0; border-bottom: 1px solid #eee; }
svg.chart { display: block; margin: 16px 0; }
p.empty { color: #777; }
)css";

}  // namespace

std::string RenderRunReport(const RunSeries& run, const RunReportOptions& options) {
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
       << EscapeXml(options.title) << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n"
       << "<h1>" << EscapeXml(options.title) << "</h1>\n";
  SummaryTable(html, run, options);
  if (run.epochs.empty()) {
    html << "<p class=\"empty\">No epoch finished; there are no curves to draw.</p>\n";
  } else {
    html << "<h2>Curves</h2>\n" << LossChart(run) << AccuracyChart(run) << ThroughputChart(run);
  }
  if (!run.world.empty()) html << WorldSizeChart(run);
  EventTable(html, run);
  SharesTable(html, run);
  html << "</body>\n</html>\n";
  return html.str();
}

std::string WriteRunReport(const RunSeries& run, const std::string& run_dir,
                           const RunReportOptions& options) {
  if (options.file_name.empty() || options.file_name.find('/') != std::string::npos) {
    throw FileWriteError("report file name must be a plain file name, got '" + options.file_name +
                         "'");
  }
  std::error_code error;
  std::filesystem::create_directories(run_dir, error);
  if (error || !std::filesystem::is_directory(run_dir)) {
    throw FileWriteError("cannot use run directory " + run_dir + ": " +
                         (error ? error.message() : "not a directory"));
  }
  const std::string path = (std::filesystem::path(run_dir) / options.file_name).string();
  runtime::WriteFileAtomically(path, RenderRunReport(run, options));
  return path;
}

}  // namespace elastic::monitoring
