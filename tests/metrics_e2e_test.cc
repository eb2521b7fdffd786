// End-to-end test of the driver's /metrics endpoint: the real //trainer:cifar
// binary trains resnet8 on Fashion-MNIST with two workers while this test
// scrapes the URL the driver printed, as Prometheus would.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "monitoring/testing/exposition.h"
#include "monitoring/testing/http_get.h"
#include "tests/job_events.h"
#include "tests/process.h"

namespace {

using elastic::monitoring::testing::Exposition;
using elastic::monitoring::testing::HttpGet;
using elastic::monitoring::testing::HttpResponse;
using elastic::monitoring::testing::ParseExposition;
using elastic::monitoring::testing::Sample;
using Clock = std::chrono::steady_clock;

constexpr char kBinary[] = "examples/cifar/cifar";

using Job = elastic::tests::Process;
using elastic::tests::ReadFile;

// The metrics URL of the driver's "start" event in `run_dir`, or "" if it
// logged none within the timeout.
std::string WaitForMetricsUrl(const std::string& run_dir, std::chrono::seconds timeout) {
  const elastic::tests::JobEvent start = elastic::tests::WaitForEvent(
      run_dir, timeout, [](const elastic::tests::JobEvent& e) { return e["event"] == "start"; });
  return start.is_null() ? "" : start["metrics_url"].get<std::string>();
}

// Whether Prometheus assumes `sample` only grows: a counter, or a histogram's
// bucket, count or sum.
bool IsMonotonic(const Exposition& exposition, const Sample& sample) {
  auto type_of = [&](const std::string& family) {
    const auto it = exposition.types.find(family);
    return it == exposition.types.end() ? std::string() : it->second;
  };
  if (type_of(sample.name) == "counter") return true;
  for (const std::string suffix : {"_bucket", "_count", "_sum"}) {
    const std::string& name = sample.name;
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        type_of(name.substr(0, name.size() - suffix.size())) == "histogram") {
      return true;
    }
  }
  return false;
}

std::map<std::string, double> MonotonicSeries(const Exposition& exposition) {
  std::map<std::string, double> series;
  for (const Sample& sample : exposition.samples) {
    if (!IsMonotonic(exposition, sample)) continue;
    std::string key = sample.name + "{";
    for (const auto& [label, value] : sample.labels) key += label + "=" + value + ",";
    series[key + "}"] = sample.value;
  }
  return series;
}

TEST(MetricsEndToEndTest, ScrapesDuringARealJobAndWritesTheReport) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = tmp != nullptr ? tmp : "/tmp";
  const std::string run_dir = root + "/run";
  Job job({kBinary, "--workers=2", "--model=resnet8", "--dataset=fashion-mnist",
           "--train-samples=1024", "--test-samples=512", "--epochs=2", "--batch-size=64",
           "--log-every=1", "--metrics-port=0", "--run-dir=" + run_dir},
          root + "/job.log");

  const std::string url = WaitForMetricsUrl(run_dir, std::chrono::seconds(120));
  ASSERT_FALSE(url.empty()) << "the driver logged no metrics URL:\n" << job.Output();

  // Scrape until the job exits, as Prometheus would (more often, to catch more
  // of the run). A scrape can fail only once the driver is shutting down.
  std::vector<Exposition> scrapes;
  const Clock::time_point deadline = Clock::now() + std::chrono::minutes(10);
  int code = -1;
  while (!job.Exited(&code)) {
    ASSERT_LT(Clock::now(), deadline) << "the job did not finish:\n" << job.Output();
    const HttpResponse response = HttpGet(url, /*timeout_seconds=*/30);
    if (response.status == 200) {
      scrapes.push_back(ParseExposition(response.body));
    } else {
      // The driver closes its endpoint just before it exits, so a refused
      // scrape is an error only if the job then keeps running.
      const Clock::time_point grace = Clock::now() + std::chrono::seconds(60);
      while (!job.Exited(&code) && Clock::now() < grace) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!job.Exited(&code)) {
        ADD_FAILURE() << "scrape of a running job failed: " << response.status << " "
                      << response.error;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_EQ(code, 0) << job.Output();
  ASSERT_GE(scrapes.size(), 2u) << job.Output();

  bool saw_two_workers = false;
  bool saw_step_time_of_both_ranks = false;
  for (std::size_t i = 0; i < scrapes.size(); ++i) {
    const Exposition& scrape = scrapes[i];
    const std::optional<double> world = scrape.Value("elastic_world_size");
    ASSERT_TRUE(world.has_value()) << "scrape " << i;
    EXPECT_LE(*world, 2) << "scrape " << i;
    if (*world == 2) saw_two_workers = true;
    // The workers' own step times, one row per live rank, each a real duration.
    const std::vector<Sample> steps = scrape.Find("elastic_rank_step_duration_seconds");
    EXPECT_LE(steps.size(), 2u) << "scrape " << i;
    for (const Sample& step : steps) EXPECT_GT(step.value, 0) << "scrape " << i;
    if (scrape.Value("elastic_rank_step_duration_seconds", {{"rank", "0"}}) &&
        scrape.Value("elastic_rank_step_duration_seconds", {{"rank", "1"}})) {
      saw_step_time_of_both_ranks = true;
    }
    for (const char* ratio : {"elastic_train_accuracy_ratio", "elastic_test_accuracy_ratio"}) {
      for (const Sample& sample : scrape.Find(ratio)) {
        EXPECT_GE(sample.value, 0.0) << ratio << " in scrape " << i;
        EXPECT_LE(sample.value, 1.0) << ratio << " in scrape " << i;
      }
    }
    if (i == 0) continue;
    const std::map<std::string, double> before = MonotonicSeries(scrapes[i - 1]);
    const std::map<std::string, double> after = MonotonicSeries(scrape);
    for (const auto& [key, value] : before) {
      ASSERT_TRUE(after.count(key)) << key << " disappeared in scrape " << i;
      EXPECT_GE(after.at(key), value) << key << " decreased in scrape " << i;
    }
  }
  EXPECT_TRUE(saw_two_workers) << "no scrape showed elastic_world_size 2";
  EXPECT_TRUE(saw_step_time_of_both_ranks) << "no scrape showed the step time of ranks 0 and 1";
  // What the workers measured reached the driver: every step allreduces its
  // gradients and every commit point its control vector, on both ranks.
  const std::map<std::string, double> last = MonotonicSeries(scrapes.back());
  EXPECT_GT(last.at("elastic_allreduce_duration_seconds_count{}"), 0) << job.Output();
  EXPECT_GT(last.at("elastic_allreduce_duration_seconds_sum{}"), 0);
  EXPECT_GT(last.at("elastic_allreduce_bytes_total{}"), 0);
  EXPECT_EQ(last.at("elastic_allreduce_duration_seconds_bucket{le=+Inf,}"),
            last.at("elastic_allreduce_duration_seconds_count{}"));
  // The head served the job's key-value traffic and membership.
  EXPECT_GT(last.at("elastic_runtime_messages_total{}"), 0);
  EXPECT_TRUE(last.count("elastic_heartbeat_misses_total{}"));
  // The driver counts samples from rank 0's progress, which carries the
  // samples of the last commit and is reported again after each epoch's final
  // commit: by the last scrape at least the first epoch (1024 samples) counts.
  EXPECT_GE(MonotonicSeries(scrapes.back()).at("elastic_samples_processed_total{}"), 1024)
      << job.Output();

  const std::string report = ReadFile(run_dir + "/report.html");
  ASSERT_FALSE(report.empty()) << "no " << run_dir << "/report.html";
  EXPECT_NE(report.find("<svg"), std::string::npos);
  EXPECT_NE(report.find("<path"), std::string::npos);
}

}  // namespace
