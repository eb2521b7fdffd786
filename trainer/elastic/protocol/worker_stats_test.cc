#include "trainer/elastic/protocol/worker_stats.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "monitoring/training_metrics.h"

namespace elastic::trainer {
namespace {

const std::vector<double>& Bounds() {
  return monitoring::TrainingMetrics::AllreduceDurationBuckets();
}

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

TEST(WorkerStatsTest, RecordSurvivesItsMessage) {
  WorkerStats stats;
  stats.ObserveAllreduce(0.00123456789, 1 << 20);
  stats.ObserveAllreduce(60, 3);
  stats.ObserveStep(7, 3, 0.25);
  const WorkerStatsRecord r = stats.Snapshot();
  capnp::MallocMessageBuilder message;
  ToProto(42, r, message.initRoot<proto::WorkerStats>());

  const proto::WorkerStats::Reader in = message.getRoot<proto::WorkerStats>().asReader();
  EXPECT_EQ(in.getMemberId(), 42u);
  ASSERT_EQ(in.getAllreduceBuckets().size(), Bounds().size() + 1);
  const WorkerStatsRecord back = FromProto(in);
  EXPECT_EQ(back.generation, 7u);
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.step_seconds, 0.25);
  EXPECT_EQ(back.allreduce_seconds, r.allreduce_seconds);  // exactly: a Float64
  EXPECT_EQ(back.allreduce_bytes, (uint64_t{1} << 20) + 3);
  EXPECT_EQ(back.allreduce_buckets, r.allreduce_buckets);
  EXPECT_EQ(back.allreduces(), 2u);
}

TEST(WorkerStatsTest, ARecordBeforeTheFirstStepSurvivesItsMessageToo) {
  capnp::MallocMessageBuilder message;
  ToProto(1, WorkerStats().Snapshot(), message.initRoot<proto::WorkerStats>());
  const WorkerStatsRecord back = FromProto(message.getRoot<proto::WorkerStats>().asReader());
  EXPECT_EQ(back.rank, -1);
  EXPECT_EQ(back.generation, 0u);
  EXPECT_EQ(back.allreduce_buckets, std::vector<uint64_t>(Bounds().size() + 1, 0));
}

TEST(WorkerStatsTest, PublisherSendsAtMostOncePerInterval) {
  WorkerStats stats;
  std::vector<WorkerStatsRecord> sent;
  const WorkerStatsPublisher::Sink sink = [&](const WorkerStatsRecord& r) { sent.push_back(r); };
  WorkerStatsPublisher publisher(stats, std::chrono::hours(1));
  EXPECT_EQ(publisher.member_id(), 0u);
  publisher.PublishIfDue(sink);  // not registered yet: no one could tell whose it is
  publisher.Publish(sink);
  EXPECT_TRUE(sent.empty());
  publisher.SetMemberId(42);
  EXPECT_EQ(publisher.member_id(), 42u);
  stats.ObserveAllreduce(0.001, 8);
  publisher.PublishIfDue(sink);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].allreduces(), 1u);
  stats.ObserveAllreduce(0.001, 8);
  publisher.PublishIfDue(sink);  // within the hour: skipped
  EXPECT_EQ(sent.size(), 1u);
  publisher.Publish(sink);  // at the end of a generation: always
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].allreduces(), 2u);
  EXPECT_EQ(sent[1].allreduce_bytes, 16u);

  WorkerStatsPublisher eager(stats, std::chrono::milliseconds(0));
  eager.SetMemberId(43);
  eager.PublishIfDue(sink);
  eager.PublishIfDue(sink);  // the interval is over at once
  EXPECT_EQ(sent.size(), 4u);
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
