#include "trainer/elastic/worker_stats.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "monitoring/training_metrics.h"
#include "trainer/elastic/job_keys.h"

namespace elastic::trainer {
namespace {

const std::vector<double>& Bounds() {
  return monitoring::TrainingMetrics::AllreduceDurationBuckets();
}

// The head's store as far as the publisher cares: puts land in a map.
class MapStore : public runtime::KeyValueStore {
 public:
  void Put(const std::string& key, const std::string& value) override {
    values[key] = value;
    ++puts;
  }
  std::optional<std::string> Get(const std::string& key) override {
    auto it = values.find(key);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
  std::string Wait(const std::string& key, std::chrono::milliseconds) override {
    return Get(key).value();
  }
  std::map<std::string, std::string> values;
  int puts = 0;
};

TEST(WorkerStatsTest, BucketsAllreducesLikePrometheusDoes) {
  WorkerStats stats;
  stats.ObserveAllreduce(0.0001, 8);  // on a bound: counted in it ("le")
  stats.ObserveAllreduce(0.002, 16);  // in (0.001, 0.0025]
  stats.ObserveAllreduce(60, 32);     // beyond every bound: +Inf
  const WorkerStatsRecord r = stats.Snapshot();
  ASSERT_EQ(r.allreduce_buckets.size(), Bounds().size() + 1);
  EXPECT_EQ(r.allreduce_buckets[0], 1u);
  EXPECT_EQ(Bounds()[4], 0.0025);
  EXPECT_EQ(r.allreduce_buckets[4], 1u);
  EXPECT_EQ(r.allreduce_buckets.back(), 1u);
  EXPECT_EQ(r.allreduces(), 3u);
  EXPECT_EQ(r.allreduce_bytes, 56u);
  EXPECT_NEAR(r.allreduce_seconds, 60.0021, 1e-12);
  EXPECT_EQ(r.rank, -1);  // no step yet
}

TEST(WorkerStatsTest, RecordSurvivesItsTextForm) {
  WorkerStats stats;
  stats.ObserveAllreduce(0.00123456789, 1 << 20);
  stats.ObserveStep(7, 3, 0.25);
  const WorkerStatsRecord r = stats.Snapshot();
  const WorkerStatsRecord back = WorkerStatsRecord::Parse(r.Encode());
  EXPECT_EQ(back.generation, 7u);
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.step_seconds, 0.25);
  EXPECT_EQ(back.allreduce_seconds, r.allreduce_seconds);  // exactly: %.17g
  EXPECT_EQ(back.allreduce_bytes, uint64_t{1} << 20);
  EXPECT_EQ(back.allreduce_buckets, r.allreduce_buckets);
}

TEST(WorkerStatsTest, BadRecordsAreRefusedWithTheReason) {
  const std::string good = WorkerStats().Snapshot().Encode();
  EXPECT_NO_THROW(WorkerStatsRecord::Parse(good));
  auto reason = [](const std::string& text) {
    try {
      WorkerStatsRecord::Parse(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(reason("v2 1 0 0 0 0 0").find("not a v1 record"), std::string::npos);
  EXPECT_NE(reason("v1 1 0 0.1").find("truncated"), std::string::npos);
  EXPECT_NE(reason("v1 1 0 -0.5 0 0 17").find("step time"), std::string::npos);
  EXPECT_NE(reason("v1 1 0 0 0 0 3 1 2 3").find("3 allreduce buckets"), std::string::npos);
  EXPECT_NE(reason(good.substr(0, good.rfind(' '))).find("fewer bucket counts"), std::string::npos);
  EXPECT_NE(reason(good + " 9").find("more values"), std::string::npos);
}

TEST(WorkerStatsTest, PublisherPutsUnderTheMemberKeyAtMostOncePerInterval) {
  WorkerStats stats;
  MapStore store;
  WorkerStatsPublisher publisher(stats, std::chrono::hours(1));
  publisher.PublishIfDue(store);  // not registered yet: nowhere to put it
  EXPECT_EQ(store.puts, 0);
  publisher.SetMemberId(42);
  stats.ObserveAllreduce(0.001, 8);
  publisher.PublishIfDue(store);
  ASSERT_EQ(store.puts, 1);
  EXPECT_EQ(WorkerStatsRecord::Parse(store.values.at(JobKey::WorkerStats(42))).allreduces(), 1u);
  stats.ObserveAllreduce(0.001, 8);
  publisher.PublishIfDue(store);  // within the hour: skipped
  EXPECT_EQ(store.puts, 1);
  publisher.Publish(store);  // at the end of a generation: always
  EXPECT_EQ(store.puts, 2);
  EXPECT_EQ(WorkerStatsRecord::Parse(store.values.at(JobKey::WorkerStats(42))).allreduces(), 2u);
}

TEST(WorkerStatsTest, ConcurrentObservationsLoseNothing) {
  WorkerStats stats;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) stats.ObserveAllreduce(0.001, 4);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(stats.Snapshot().allreduces(), 4000u);
  EXPECT_EQ(stats.Snapshot().allreduce_bytes, 16000u);
}

}  // namespace
}  // namespace elastic::trainer
