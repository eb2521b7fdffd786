// Line and step charts as inline SVG, for the run report. No script, no
// external resources: the markup stands alone inside an HTML page.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace elastic::monitoring {

struct ChartSeries {
  std::string name;   // legend text; also the path's data-series attribute
  std::string color;  // any CSS colour
  // (x, y) in data units. A non-finite y breaks the line (a diverged loss, an
  // epoch without evaluation) instead of dragging the scale to infinity.
  std::vector<std::pair<double, double>> points;
  // Step series hold their value until the next point (a world size), drawn
  // with H/V segments and extended to ChartSpec::x_end.
  bool step = false;
  // Line series: a dot with a tooltip per point (the run report's few epochs);
  // off for dense series (a dashboard panel's hundreds of samples).
  bool dots = true;
};

// A vertical line at x with a short label (a membership change).
struct ChartMarker {
  double x = 0;
  std::string label;
  std::string color;
};

struct ChartSpec {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<ChartSeries> series;
  std::vector<ChartMarker> markers;
  // Fixed y range (accuracy in percent: 0..100); otherwise fitted to the data.
  bool fixed_y = false;
  double y_min = 0;
  double y_max = 1;
  // Right end of the x axis when it should run past the last point (the end
  // of the run on a timeline); ignored when smaller than the data.
  double x_end = 0;
  int width = 720;
  int height = 300;
};

// One <svg> element. Every series is one <path class="series"> whose `d`
// holds its points in order (M/L for lines, M/H/V for steps); line series also
// get one <circle> per point with a <title> tooltip giving the exact value
// (unless `dots` is false).
std::string RenderChart(const ChartSpec& spec);

// Escapes &, <, >, " and ' for text and attribute values.
std::string EscapeXml(const std::string& text);

// Round tick positions (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int max_ticks = 6);

}  // namespace elastic::monitoring
