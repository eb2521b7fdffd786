// The endpoint as Prometheus sees it: real HTTP on an OS-chosen port, the
// exposition text parsed back, counters checked across scrapes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "monitoring/metrics_exposer.h"
#include "monitoring/testing/exposition.h"
#include "monitoring/testing/http_get.h"
#include "monitoring/training_metrics.h"

namespace elastic::monitoring {
namespace {

using testing::Exposition;
using testing::HttpGet;
using testing::ParseExposition;

MetricsOptions AnyFreePort() {
  MetricsOptions options;
  options.port = 0;
  return options;
}

Exposition ScrapeOverHttp(const MetricsExposer& exposer) {
  const testing::HttpResponse response = HttpGet(exposer.url());
  EXPECT_EQ(response.status, 200) << response.error;
  return ParseExposition(response.body);
}

// Every series of a counter or a histogram, keyed by name and labels: values
// Prometheus assumes only grow (a drop reads as a process restart).
std::map<std::string, double> MonotonicSeries(const Exposition& e) {
  std::map<std::string, double> series;
  for (const auto& sample : e.samples) {
    std::string family = sample.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (family.size() > s.size() && family.compare(family.size() - s.size(), s.size(), s) == 0 &&
          e.types.count(family.substr(0, family.size() - s.size())) > 0) {
        family = family.substr(0, family.size() - s.size());
      }
    }
    const std::string type = e.types.count(family) ? e.types.at(family) : "";
    if (type != "counter" && type != "histogram") continue;
    std::string key = sample.name;
    for (const auto& [k, v] : sample.labels) key += "," + k + "=" + v;
    series[key] = sample.value;
  }
  return series;
}

// One step of a pretend-but-plausible training loop, driven through the API
// the trainer calls.
void TrainStep(TrainingMetrics& metrics, int step) {
  metrics.SetStep(step);
  metrics.AddSamplesProcessed(256);
  metrics.ObserveAllreduce(0.0005 * (step % 7 + 1), 1 << 20);
  metrics.SetRankStepTime(0, 0.12);
  metrics.SetRankStepTime(1, 0.14);
  metrics.AddRuntimeMessages(4);
  metrics.SetTrainLoss(2.3 / (1 + step));
  metrics.SetTrainAccuracy(std::min(1.0, 0.1 + 0.01 * step));
  metrics.SetImagesPerSecond(1800 + step);
}

TEST(MetricsExposerTest, PortZeroBindsAFreePortAndReportsIt) {
  MetricsExposer exposer(AnyFreePort());
  EXPECT_GT(exposer.port(), 0);
  EXPECT_EQ(exposer.address(), "127.0.0.1");
  EXPECT_EQ(exposer.url(), "http://127.0.0.1:" + std::to_string(exposer.port()) + "/metrics");
}

TEST(MetricsExposerTest, ScrapesShowTheValuesSetAndCountersNeverDecrease) {
  TrainingMetrics metrics;
  MetricsExposer exposer(AnyFreePort());
  exposer.Serve(metrics.registry());

  metrics.SetWorldSize(2);
  metrics.SetGeneration(1);
  metrics.SetEpoch(0);
  metrics.SetLearningRate(0.2);
  metrics.RecordMembershipChange(MembershipChangeReason::kJoin, 2);
  for (int step = 1; step <= 10; ++step) TrainStep(metrics, step);
  metrics.SetTestAccuracy(0.31);

  const Exposition first = ScrapeOverHttp(exposer);
  EXPECT_EQ(first.types.at("elastic_world_size"), "gauge");
  EXPECT_EQ(first.types.at("elastic_samples_processed_total"), "counter");
  EXPECT_EQ(first.types.at("elastic_allreduce_duration_seconds"), "histogram");
  EXPECT_EQ(first.Value("elastic_world_size"), 2);
  EXPECT_EQ(first.Value("elastic_step"), 10);
  EXPECT_EQ(first.Value("elastic_samples_processed_total"), 2560);
  EXPECT_EQ(first.Value("elastic_allreduce_duration_seconds_count"), 10);
  EXPECT_EQ(first.Value("elastic_allreduce_bytes_total"), 10.0 * (1 << 20));
  EXPECT_EQ(first.Value("elastic_membership_changes_total", {{"reason", "join"}}), 2);
  EXPECT_EQ(first.Find("elastic_rank_step_duration_seconds").size(), 2u);
  for (const char* ratio : {"elastic_train_accuracy_ratio", "elastic_test_accuracy_ratio"}) {
    const double value = *first.Value(ratio);
    EXPECT_GE(value, 0.0) << ratio;
    EXPECT_LE(value, 1.0) << ratio;
  }
  EXPECT_DOUBLE_EQ(*first.Value("elastic_test_accuracy_ratio"), 0.31);

  // A failure: rank 1 leaves, the step rewinds to the last commit, training goes on.
  metrics.RecordMembershipChange(MembershipChangeReason::kFailure);
  metrics.AddHeartbeatMisses(3);
  metrics.SetWorldSize(1);
  metrics.SetGeneration(2);
  metrics.RetainRanks(1);
  metrics.ObserveRescaleDuration(2.5);
  for (int step = 8; step <= 20; ++step) TrainStep(metrics, step);
  metrics.RetainRanks(1);  // TrainStep wrote rank 1 again; the trainer would not

  const Exposition second = ScrapeOverHttp(exposer);
  EXPECT_EQ(second.Value("elastic_world_size"), 1);
  EXPECT_EQ(second.Value("elastic_generation"), 2);
  EXPECT_EQ(second.Value("elastic_membership_changes_total", {{"reason", "failure"}}), 1);
  EXPECT_EQ(second.Value("elastic_heartbeat_misses_total"), 3);
  EXPECT_EQ(second.Find("elastic_rank_step_duration_seconds").size(), 1u);

  const auto before = MonotonicSeries(first);
  const auto after = MonotonicSeries(second);
  ASSERT_GT(before.size(), 20u);  // counters, reasons, histogram buckets
  for (const auto& [key, value] : before) {
    ASSERT_TRUE(after.count(key)) << key << " disappeared";
    EXPECT_GE(after.at(key), value) << key << " decreased";
  }
  EXPECT_GT(after.at("elastic_samples_processed_total"),
            before.at("elastic_samples_processed_total"));
}

TEST(MetricsExposerTest, OnlyMetricsIsServed) {
  TrainingMetrics metrics;
  MetricsExposer exposer(AnyFreePort());
  exposer.Serve(metrics.registry());
  const auto response = HttpGet("http://127.0.0.1:" + std::to_string(exposer.port()) + "/admin");
  EXPECT_EQ(response.status, 404) << response.error;
}

TEST(MetricsExposerTest, APortInUseIsAClearError) {
  MetricsExposer first(AnyFreePort());
  MetricsOptions same;
  same.port = first.port();
  try {
    MetricsExposer second(same);
    FAIL() << "bound a port already in use";
  } catch (const MetricsError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(first.port())),
              std::string::npos)
        << e.what();
  }
}

TEST(MetricsExposerTest, ImpossibleOptionsNameTheFlag) {
  MetricsOptions host_name;
  host_name.address = "localhost";
  host_name.port = 0;
  EXPECT_THROW(
      {
        try {
          MetricsExposer exposer(host_name);
        } catch (const MetricsError& e) {
          EXPECT_NE(std::string(e.what()).find("--metrics-address"), std::string::npos);
          throw;
        }
      },
      MetricsError);
  for (int64_t port : {-1L, 65536L}) {
    MetricsOptions bad_port;
    bad_port.port = port;
    try {
      ValidateMetricsOptions(bad_port);
      ADD_FAILURE() << "accepted port " << port;
    } catch (const MetricsError& e) {
      EXPECT_NE(std::string(e.what()).find("--metrics-port"), std::string::npos) << e.what();
    }
  }
  MetricsOptions not_local;
  not_local.address = "192.0.2.1";  // TEST-NET-1: valid, but no interface has it
  not_local.port = 0;
  try {
    MetricsExposer exposer(not_local);
    ADD_FAILURE() << "bound an address this machine does not have";
  } catch (const MetricsError& e) {
    EXPECT_NE(std::string(e.what()).find("192.0.2.1:0"), std::string::npos) << e.what();
  }
  MetricsOptions any_interface;
  any_interface.address = "0.0.0.0";
  EXPECT_NO_THROW(ValidateMetricsOptions(any_interface));
}

// The driver's last values reach Prometheus only if it scrapes once more
// before the process exits; AwaitNextScrape waits for that scrape, and only
// when something is scraping.
TEST(MetricsExposerTest, AwaitNextScrapeWaitsOnlyForAScraperThatIsThere) {
  TrainingMetrics metrics;
  MetricsExposer exposer(AnyFreePort());
  exposer.Serve(metrics.registry());
  EXPECT_FALSE(exposer.AwaitNextScrape(std::chrono::seconds(60))) << "nothing scraped yet";

  std::atomic<bool> scraping{true};
  std::atomic<int> scrapes{0};
  std::thread scraper([&] {
    while (scraping) {
      if (HttpGet(exposer.url(), 30).status == 200) ++scrapes;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  while (scrapes < 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  metrics.SetWorldSize(7);
  const int before = scrapes;
  EXPECT_TRUE(exposer.AwaitNextScrape(std::chrono::seconds(60)));
  scraping = false;
  scraper.join();
  EXPECT_GT(scrapes, before);
  EXPECT_EQ(ScrapeOverHttp(exposer).Value("elastic_world_size"), 7.0);

  // The scraper is gone: the wait ends after twice its interval, with false.
  EXPECT_FALSE(exposer.AwaitNextScrape(std::chrono::seconds(60)));
}

}  // namespace
}  // namespace elastic::monitoring
