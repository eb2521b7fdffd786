#include "monitoring/run_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "monitoring/run_history.h"
#include "runtime/atomic_file.h"

namespace elastic::monitoring {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(base ? base : "/tmp") / name;
  fs::remove_all(dir);
  return dir.string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

struct Vertex {
  double x, y;
};

// The vertices a path's `d` visits, with the number of sub-paths (M commands).
struct PathData {
  std::vector<Vertex> vertices;
  int subpaths = 0;
};

PathData SeriesPath(const std::string& html, const std::string& series) {
  const std::regex path_re("<path class=\"series\" data-series=\"" + series + "\" d=\"([^\"]*)\"");
  std::smatch match;
  if (!std::regex_search(html, match, path_re)) {
    ADD_FAILURE() << "no path for series " << series;
    return {};
  }
  PathData path;
  std::istringstream d(match[1].str());
  std::string token;
  Vertex pen{0, 0};
  while (d >> token) {
    const char command = token[0];
    const std::string args = token.substr(1);
    if (command == 'M' || command == 'L') {
      const size_t comma = args.find(',');
      pen = {std::stod(args.substr(0, comma)), std::stod(args.substr(comma + 1))};
      if (command == 'M') ++path.subpaths;
    } else if (command == 'H') {
      pen.x = std::stod(args);
    } else if (command == 'V') {
      pen.y = std::stod(args);
    } else {
      ADD_FAILURE() << "unexpected path command " << token;
    }
    path.vertices.push_back(pen);
  }
  return path;
}

// The path must be an affine image of the data: equal x steps for equal epoch
// steps, and y proportional to the value (upwards, as SVG's y grows down).
void ExpectPathEncodes(const PathData& path, const std::vector<double>& values,
                       const std::string& name) {
  ASSERT_EQ(path.vertices.size(), values.size()) << name;
  size_t far = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::fabs(values[i] - values[0]) > std::fabs(values[far] - values[0])) far = i;
  }
  ASSERT_NE(far, 0u) << name << ": test data must vary";
  const double dx = path.vertices[1].x - path.vertices[0].x;
  EXPECT_GT(dx, 0) << name;
  const double y_per_value =
      (path.vertices[far].y - path.vertices[0].y) / (values[far] - values[0]);
  EXPECT_LT(y_per_value, 0) << name << ": larger values must be drawn higher";
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_NEAR(path.vertices[i].x - path.vertices[0].x, dx * i, 0.02) << name << " point " << i;
    EXPECT_NEAR(path.vertices[i].y - path.vertices[0].y, y_per_value * (values[i] - values[0]),
                0.02)
        << name << " point " << i;
  }
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

// Six epochs of a run that lost a worker at 10 s and got one back at 20 s.
RunSeries SampleRun(std::vector<double>* loss, std::vector<double>* train_acc,
                    std::vector<double>* test_acc, std::vector<double>* throughput) {
  *loss = {2.1, 1.42, 1.05, 0.93, 0.71, 0.66};
  *train_acc = {0.31, 0.52, 0.63, 0.68, 0.75, 0.77};
  *test_acc = {0.35, 0.49, 0.58, 0.66, 0.69, 0.72};
  *throughput = {1810, 1902, 1420, 1398, 1880, 1905};
  RunHistory history;
  history.RecordWorldSizeAt(0, 4, 1, std::nullopt);
  history.RecordWorldSizeAt(10, 3, 2, MembershipChangeReason::kFailure);
  history.RecordWorldSizeAt(20, 4, 3, MembershipChangeReason::kJoin);
  for (int i = 0; i < 6; ++i) {
    EpochRecord e;
    e.epoch = i;
    e.train_loss = (*loss)[i];
    e.train_accuracy = (*train_acc)[i];
    e.test_accuracy = (*test_acc)[i];
    e.images_per_second = (*throughput)[i];
    e.learning_rate = 0.1;
    e.world_size = (i == 2 || i == 3) ? 3 : 4;
    e.seconds = 5.0 * (i + 1);
    history.RecordEpoch(e);
  }
  return history.Snapshot();
}

TEST(RunReportTest, WritesASelfContainedFileWithEveryCurve) {
  std::vector<double> loss, train_acc, test_acc, throughput;
  const RunSeries run = SampleRun(&loss, &train_acc, &test_acc, &throughput);
  const std::string dir = TempDir("run-report");  // does not exist yet
  RunReportOptions options;
  options.title = "resnet8 on cifar10";
  options.details = {{"model", "resnet8"}};
  const std::string path = WriteRunReport(run, dir, options);
  EXPECT_EQ(path, dir + "/report.html");

  // Exactly the report in the run directory: no temp file left behind.
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path().filename());
  EXPECT_EQ(files, std::vector<std::string>{"report.html"});
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::others_read, fs::perms::others_read);

  const std::string html = ReadFile(path);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  for (const char* external : {"<script", "src=", "href=", "<link", "@import", "url("}) {
    EXPECT_EQ(html.find(external), std::string::npos) << "not self-contained: " << external;
  }
  EXPECT_EQ(Count(html, "<svg "), 4u);  // loss, accuracy, throughput, world size

  ExpectPathEncodes(SeriesPath(html, "train loss"), loss, "train loss");
  ExpectPathEncodes(SeriesPath(html, "train accuracy"), train_acc, "train accuracy");
  ExpectPathEncodes(SeriesPath(html, "test accuracy"), test_acc, "test accuracy");
  ExpectPathEncodes(SeriesPath(html, "images per second"), throughput, "images per second");
  // Tooltips carry the exact values.
  EXPECT_NE(html.find("<title>train loss at 3: 0.93</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>test accuracy at 5: 72</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>images per second at 2: 1420</title>"), std::string::npos);

  // World size: a step line 4 -> 3 -> 4 to the end of the run, with a marker
  // at each change.
  const PathData workers = SeriesPath(html, "workers");
  ASSERT_EQ(workers.vertices.size(), 6u);  // M, H V, H V, H
  const double y4 = workers.vertices[0].y;
  const double y3 = workers.vertices[2].y;
  EXPECT_GT(y3, y4);  // fewer workers are drawn lower
  EXPECT_DOUBLE_EQ(workers.vertices[1].y, y4);
  EXPECT_DOUBLE_EQ(workers.vertices[3].y, y3);
  EXPECT_DOUBLE_EQ(workers.vertices[4].y, y4);
  EXPECT_DOUBLE_EQ(workers.vertices[1].x, workers.vertices[2].x);  // the drop is vertical
  const double x0 = workers.vertices[0].x;
  EXPECT_NEAR(workers.vertices[4].x - x0, 2 * (workers.vertices[2].x - x0), 0.02);  // 20 s vs 10 s
  EXPECT_NEAR(workers.vertices[5].x - x0, 3 * (workers.vertices[2].x - x0), 0.02);  // ends at 30 s
  EXPECT_EQ(Count(html, "<g class=\"marker\">"), 2u);
  EXPECT_NE(html.find(">failure</text>"), std::string::npos);
  EXPECT_NE(html.find(">join</text>"), std::string::npos);

  // The summary speaks plainly.
  EXPECT_NE(html.find("<th>best test accuracy</th><td>72.00% (epoch 5)</td>"), std::string::npos);
  EXPECT_NE(html.find("<th>membership changes</th><td>1 failure, 1 join</td>"), std::string::npos);
  EXPECT_NE(html.find("<th>world size</th><td>3 to 4</td>"), std::string::npos);
}

TEST(RunReportTest, AnEpochWithoutEvaluationBreaksTheTestCurve) {
  RunHistory history;
  for (int i = 0; i < 4; ++i) {
    EpochRecord e;
    e.epoch = i;
    e.train_loss = 1.0 / (i + 1);
    e.train_accuracy = 0.2 * (i + 1);
    e.test_accuracy = i == 1 ? NAN : 0.2 * (i + 1);
    history.RecordEpoch(e);
  }
  const std::string html = RenderRunReport(history.Snapshot());
  const PathData test = SeriesPath(html, "test accuracy");
  EXPECT_EQ(test.vertices.size(), 3u);
  EXPECT_EQ(test.subpaths, 2);
  EXPECT_EQ(Count(html, "<title>test accuracy at "), 3u);
  EXPECT_NE(html.find("<th>final test accuracy</th><td>80.00%</td>"), std::string::npos);
}

TEST(RunReportTest, ARunWithoutEpochsStillGetsAReport) {
  RunHistory history;
  history.RecordWorldSize(2, 1, std::nullopt);
  const std::string html = RenderRunReport(history.Snapshot());
  EXPECT_NE(html.find("No epoch finished"), std::string::npos);
  EXPECT_EQ(Count(html, "<svg "), 1u);  // the world-size timeline
}

TEST(RunReportTest, TextIsEscaped) {
  RunReportOptions options;
  options.title = "<script>alert(1)</script> & co";
  const std::string html = RenderRunReport(RunHistory().Snapshot(), options);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt; &amp; co"), std::string::npos);
}

TEST(RunReportTest, RewritingReplacesTheWholeFile) {
  const std::string dir = TempDir("rewrite");
  RunHistory history;
  EpochRecord e;
  e.train_accuracy = 0.5;
  e.test_accuracy = 0.5;
  history.RecordEpoch(e);
  const std::string path = WriteRunReport(history.Snapshot(), dir);
  const std::string first = ReadFile(path);
  e.epoch = 1;
  history.RecordEpoch(e);
  WriteRunReport(history.Snapshot(), dir);
  const std::string second = ReadFile(path);
  EXPECT_NE(first, second);
  EXPECT_NE(second.find("<th>epochs</th><td>2</td>"), std::string::npos);
  EXPECT_EQ(Count(second, "</html>"), 1u);
}

TEST(RunReportTest, AnUnusableRunDirectoryIsNamed) {
  const std::string dir = TempDir("not-a-dir");
  runtime::WriteFileAtomically(dir, "a file where the run directory should be");
  try {
    WriteRunReport(RunHistory().Snapshot(), dir);
    FAIL() << "wrote into a file";
  } catch (const FileWriteError& e) {
    EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
  }
  RunReportOptions options;
  options.file_name = "../escape.html";
  EXPECT_THROW(WriteRunReport(RunHistory().Snapshot(), TempDir("ok"), options), FileWriteError);
  EXPECT_THROW(runtime::WriteFileAtomically(TempDir("missing") + "/sub/report.html", "x"),
               FileWriteError);
}

TEST(RunHistoryTest, RejectsImpossibleRecordsAndStampsTimes) {
  RunHistory history;
  EpochRecord bad;
  bad.train_accuracy = 77;
  EXPECT_THROW(history.RecordEpoch(bad), std::invalid_argument);
  bad.train_accuracy = 0.77;
  bad.images_per_second = -3;
  EXPECT_THROW(history.RecordEpoch(bad), std::invalid_argument);
  EXPECT_THROW(history.RecordWorldSizeAt(-1, 2, 1, std::nullopt), std::invalid_argument);
  EXPECT_THROW(history.RecordWorldSize(-2, 1, std::nullopt), std::invalid_argument);
  EXPECT_TRUE(history.Snapshot().epochs.empty());

  EpochRecord good;
  good.train_accuracy = 0.5;
  history.RecordEpoch(good);
  history.RecordWorldSize(3, 7, MembershipChangeReason::kLeave);
  const RunSeries run = history.Snapshot();
  ASSERT_EQ(run.epochs.size(), 1u);
  EXPECT_GE(run.epochs[0].seconds, 0);
  ASSERT_EQ(run.world.size(), 1u);
  EXPECT_GE(run.world[0].seconds, run.epochs[0].seconds);
  EXPECT_EQ(run.world[0].generation, 7);
  EXPECT_EQ(run.world[0].reason, MembershipChangeReason::kLeave);
  EXPECT_GE(run.duration_seconds, run.world[0].seconds);
}

TEST(RunHistoryTest, ConcurrentAppendsAreAllKept) {
  RunHistory history;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&history, t] {
      for (int i = 0; i < 500; ++i) {
        EpochRecord e;
        e.epoch = i;
        history.RecordEpoch(e);
        history.RecordWorldSize(t + 1, i, MembershipChangeReason::kJoin);
        if (i % 50 == 0) RenderRunReport(history.Snapshot());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const RunSeries run = history.Snapshot();
  EXPECT_EQ(run.epochs.size(), 2000u);
  EXPECT_EQ(run.world.size(), 2000u);
}

}  // namespace
}  // namespace elastic::monitoring
