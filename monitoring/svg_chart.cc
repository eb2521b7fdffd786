#include "monitoring/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace elastic::monitoring {

namespace {

constexpr double kLeft = 64;  // room for y tick labels
constexpr double kRight = 20;
constexpr double kTop = 36;     // title and legend
constexpr double kBottom = 44;  // x tick labels and axis label

std::string Fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

// Coordinates need no more than a hundredth of a pixel.
std::string Px(double value) { return Fixed(value, 2); }

// A tick label with as many decimals as the tick spacing needs.
std::string TickLabel(double value, double spacing) {
  const int decimals = spacing >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(spacing) - 1e-9));
  if (std::fabs(value) < spacing * 1e-6) value = 0;  // no "-0.00"
  return Fixed(value, std::min(decimals, 12));
}

// The exact value in a tooltip.
std::string ValueText(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.6g", value);
  return buffer;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void Add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool Empty() const { return lo > hi; }
  // A flat or empty range still needs a height to draw in.
  void Widen() {
    if (Empty()) {
      lo = 0;
      hi = 1;
    } else if (lo == hi) {
      const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
      lo -= pad;
      hi += pad;
    }
  }
};

}  // namespace

std::string EscapeXml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<double> NiceTicks(double lo, double hi, int max_ticks) {
  std::vector<double> ticks;
  if (!(hi > lo) || max_ticks < 2) return {lo};
  const double raw = (hi - lo) / (max_ticks - 1);
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  double spacing = magnitude;
  for (double factor : {1.0, 2.0, 5.0, 10.0}) {
    spacing = factor * magnitude;
    if (spacing >= raw) break;
  }
  for (double t = std::ceil(lo / spacing) * spacing; t <= hi + spacing * 1e-9; t += spacing) {
    ticks.push_back(t);
  }
  return ticks;
}

std::string RenderChart(const ChartSpec& spec) {
  Range xs, ys;
  for (const ChartSeries& series : spec.series) {
    for (const auto& [x, y] : series.points) {
      xs.Add(x);
      ys.Add(y);
    }
  }
  for (const ChartMarker& marker : spec.markers) xs.Add(marker.x);
  if (!xs.Empty() && spec.x_end > xs.hi) xs.hi = spec.x_end;
  xs.Widen();
  if (spec.fixed_y) {
    ys.lo = spec.y_min;
    ys.hi = spec.y_max;
  } else {
    ys.Widen();
    // Snap the fitted range outwards to round ticks so the curve does not
    // touch the frame.
    const std::vector<double> ticks = NiceTicks(ys.lo, ys.hi);
    if (ticks.size() >= 2) {
      const double spacing = ticks[1] - ticks[0];
      ys.lo = std::floor(ys.lo / spacing) * spacing;
      ys.hi = std::ceil(ys.hi / spacing - 1e-9) * spacing;
    }
  }

  const double plot_w = spec.width - kLeft - kRight;
  const double plot_h = spec.height - kTop - kBottom;
  auto sx = [&](double x) { return kLeft + (x - xs.lo) / (xs.hi - xs.lo) * plot_w; };
  auto sy = [&](double y) { return kTop + (ys.hi - y) / (ys.hi - ys.lo) * plot_h; };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" << spec.width
      << "\" height=\"" << spec.height << "\" viewBox=\"0 0 " << spec.width << " " << spec.height
      << "\" font-family=\"sans-serif\" role=\"img\" aria-label=\"" << EscapeXml(spec.title)
      << "\">\n";
  svg << "<text class=\"title\" font-size=\"14\" font-weight=\"600\" x=\"" << Px(kLeft)
      << "\" y=\"20\">" << EscapeXml(spec.title) << "</text>\n";

  // Grid and ticks.
  const std::vector<double> yticks = NiceTicks(ys.lo, ys.hi);
  const double yspacing = yticks.size() > 1 ? yticks[1] - yticks[0] : 1;
  for (double t : yticks) {
    svg << "<line class=\"grid\" stroke=\"#e6e6e6\" x1=\"" << Px(kLeft) << "\" x2=\""
        << Px(kLeft + plot_w) << "\" y1=\"" << Px(sy(t)) << "\" y2=\"" << Px(sy(t)) << "\"/>"
        << "<text class=\"tick\" font-size=\"11\" fill=\"#444\" text-anchor=\"end\" x=\""
        << Px(kLeft - 6) << "\" y=\"" << Px(sy(t) + 4) << "\">" << TickLabel(t, yspacing)
        << "</text>\n";
  }
  const std::vector<double> xticks = NiceTicks(xs.lo, xs.hi, 8);
  const double xspacing = xticks.size() > 1 ? xticks[1] - xticks[0] : 1;
  for (double t : xticks) {
    svg << "<text class=\"tick\" font-size=\"11\" fill=\"#444\" text-anchor=\"middle\" x=\""
        << Px(sx(t)) << "\" y=\"" << Px(kTop + plot_h + 16) << "\">" << TickLabel(t, xspacing)
        << "</text>\n";
  }
  svg << "<rect class=\"frame\" fill=\"none\" stroke=\"#999\" x=\"" << Px(kLeft) << "\" y=\""
      << Px(kTop) << "\" width=\"" << Px(plot_w) << "\" height=\"" << Px(plot_h) << "\"/>\n";
  svg << "<text class=\"axis\" font-size=\"12\" text-anchor=\"middle\" x=\""
      << Px(kLeft + plot_w / 2) << "\" y=\"" << Px(spec.height - 6.0) << "\">"
      << EscapeXml(spec.x_label) << "</text>\n";
  svg << "<text class=\"axis\" font-size=\"12\" text-anchor=\"middle\" transform=\"translate(14 "
      << Px(kTop + plot_h / 2) << ") rotate(-90)\">" << EscapeXml(spec.y_label) << "</text>\n";

  // Markers under the data, so a curve stays readable where they cross.
  for (const ChartMarker& marker : spec.markers) {
    svg << "<g class=\"marker\"><line x1=\"" << Px(sx(marker.x)) << "\" x2=\"" << Px(sx(marker.x))
        << "\" y1=\"" << Px(kTop) << "\" y2=\"" << Px(kTop + plot_h) << "\" stroke=\""
        << EscapeXml(marker.color) << "\" stroke-dasharray=\"4 3\"/><text font-size=\"11\" x=\""
        << Px(sx(marker.x) + 3) << "\" y=\"" << Px(kTop + 12) << "\" fill=\""
        << EscapeXml(marker.color) << "\">" << EscapeXml(marker.label) << "</text></g>\n";
  }

  // Series.
  for (const ChartSeries& series : spec.series) {
    std::ostringstream d;
    bool pen_down = false;
    double last_x = 0;
    for (const auto& [x, y] : series.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) {
        pen_down = false;
        continue;
      }
      if (!pen_down) {
        d << (d.tellp() > 0 ? " " : "") << "M" << Px(sx(x)) << "," << Px(sy(y));
        pen_down = true;
      } else if (series.step) {
        d << " H" << Px(sx(x)) << " V" << Px(sy(y));
      } else {
        d << " L" << Px(sx(x)) << "," << Px(sy(y));
      }
      last_x = x;
    }
    if (series.step && pen_down && xs.hi > last_x) d << " H" << Px(sx(xs.hi));
    svg << "<path class=\"series\" data-series=\"" << EscapeXml(series.name) << "\" d=\"" << d.str()
        << "\" fill=\"none\" stroke=\"" << EscapeXml(series.color) << "\" stroke-width=\"2\"/>\n";
    if (series.step || !series.dots) continue;
    for (const auto& [x, y] : series.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      svg << "<circle cx=\"" << Px(sx(x)) << "\" cy=\"" << Px(sy(y)) << "\" r=\"2.5\" fill=\""
          << EscapeXml(series.color) << "\"><title>" << EscapeXml(series.name) << " at "
          << ValueText(x) << ": " << ValueText(y) << "</title></circle>\n";
    }
  }

  // Legend, right-aligned above the plot.
  double legend_x = kLeft + plot_w;
  for (auto it = spec.series.rbegin(); it != spec.series.rend(); ++it) {
    legend_x -= 7.0 * it->name.size() + 28;
    svg << "<rect x=\"" << Px(legend_x) << "\" y=\"12\" width=\"12\" height=\"3\" fill=\""
        << EscapeXml(it->color) << "\"/><text class=\"legend\" font-size=\"11\" x=\""
        << Px(legend_x + 16) << "\" y=\"18\">" << EscapeXml(it->name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace elastic::monitoring
