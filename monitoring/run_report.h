// The end-of-run report: one self-contained HTML file (inline SVG, inline CSS,
// no script, no network) with the loss and accuracy curves, throughput and the
// world-size timeline, for people who would rather look than read.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "monitoring/run_history.h"
#include "runtime/atomic_file.h"

namespace elastic::monitoring {

using runtime::FileWriteError;

struct RunReportOptions {
  std::string title = "Training run";
  // Shown as a table under the title: model, data set, flags...
  std::vector<std::pair<std::string, std::string>> details;
  std::string file_name = "report.html";
};

// The HTML text.
std::string RenderRunReport(const RunSeries& run, const RunReportOptions& options = {});

// Writes RenderRunReport's text to run_dir/options.file_name atomically,
// creating run_dir if needed, and returns the file's path. Throws
// FileWriteError (runtime/atomic_file.h) naming the path when it cannot.
std::string WriteRunReport(const RunSeries& run, const std::string& run_dir,
                           const RunReportOptions& options = {});

}  // namespace elastic::monitoring
