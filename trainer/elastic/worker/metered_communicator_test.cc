// MeteredCommunicator over real Gloo communicators (two ranks as two threads
// of this process, rendezvous through a file store): every successful
// allreduce is counted once with its payload, other operations and failed
// allreduces are not, and the results are those of the wrapped communicator.
#include "trainer/elastic/worker/metered_communicator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "collectives/gloo_communicator.h"
#include "collectives/testing/file_kv_store.h"

namespace elastic::trainer {
namespace {

using collectives::DataType;
using collectives::ReduceOp;

struct MeteredPair {
  WorkerStats stats[2];
  std::unique_ptr<MeteredCommunicator> comm[2];
};

// Tests share the store: each takes its own generation, which scopes the keys.
std::unique_ptr<MeteredPair> MakePair(runtime::KeyValueStore& store, uint64_t generation) {
  auto pair = std::make_unique<MeteredPair>();
  collectives::GlooCommunicatorFactory factory(store);
  std::unique_ptr<collectives::Communicator> raw[2];
  std::thread other([&] { raw[1] = factory.Create({generation, 1, 2}); });
  raw[0] = factory.Create({generation, 0, 2});
  other.join();
  for (int r = 0; r < 2; ++r)
    pair->comm[r] = std::make_unique<MeteredCommunicator>(std::move(raw[r]), pair->stats[r]);
  return pair;
}

// Runs f(rank) on both ranks at once, as a collective needs.
template <typename F>
void OnBothRanks(F f) {
  std::thread other([&] { f(1); });
  f(0);
  other.join();
}

class MeteredCommunicatorTest : public ::testing::Test {
 protected:
  MeteredCommunicatorTest()
      : store_(std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp")) {}
  collectives::testing::FileKeyValueStore store_;
};

TEST_F(MeteredCommunicatorTest, CountsEachAllreduceOnceWithItsPayload) {
  auto pair = MakePair(store_, 1);
  EXPECT_EQ(pair->comm[1]->rank(), 1);
  EXPECT_EQ(pair->comm[1]->size(), 2);
  EXPECT_EQ(pair->comm[0]->backend(), "gloo");

  double sums[2][5];
  OnBothRanks([&](int r) {
    for (int i = 0; i < 5; ++i) sums[r][i] = r + i;
    pair->comm[r]->Allreduce(sums[r], 5, DataType::kFloat64, ReduceOp::kSum);
  });
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sums[0][i], 1 + 2 * i);
  for (int r = 0; r < 2; ++r) {
    const WorkerStatsRecord s = pair->stats[r].Snapshot();
    EXPECT_EQ(s.allreduces(), 1u);
    EXPECT_EQ(s.allreduce_bytes, 40u);
    EXPECT_GT(s.allreduce_seconds, 0);
  }

  // Asynchronous, waited on twice: still one call. Broadcast, allgather and
  // barrier are no allreduces.
  std::vector<float> grads[2] = {std::vector<float>(1000, 1.0f), std::vector<float>(1000, 2.0f)};
  OnBothRanks([&](int r) {
    auto work = pair->comm[r]->AllreduceAsync(grads[r].data(), grads[r].size(), DataType::kFloat32,
                                              ReduceOp::kAverage);
    work->Wait();
    work->Wait();
    EXPECT_TRUE(work->IsCompleted());
    int64_t value = r == 0 ? 7 : 0;
    pair->comm[r]->Broadcast(&value, 1, DataType::kInt64, 0);
    EXPECT_EQ(value, 7);
    int64_t all[2];
    const int64_t mine = r;
    pair->comm[r]->Allgather(&mine, all, 1, DataType::kInt64);
    EXPECT_EQ(all[1], 1);
    pair->comm[r]->Barrier();
  });
  EXPECT_EQ(grads[1][999], 1.5f);
  for (int r = 0; r < 2; ++r) {
    const WorkerStatsRecord s = pair->stats[r].Snapshot();
    EXPECT_EQ(s.allreduces(), 2u);
    EXPECT_EQ(s.allreduce_bytes, 4040u);
  }
}

TEST_F(MeteredCommunicatorTest, AFailedAllreduceIsNotCounted) {
  auto pair = MakePair(store_, 2);
  pair->comm[0]->Abort();  // forwarded: the wrapped communicator is broken
  double data[3] = {1, 2, 3};
  EXPECT_THROW(pair->comm[0]->Allreduce(data, 3, DataType::kFloat64, ReduceOp::kSum),
               collectives::CollectiveError);
  EXPECT_EQ(pair->stats[0].Snapshot().allreduces(), 0u);
  EXPECT_EQ(pair->stats[0].Snapshot().allreduce_bytes, 0u);
  pair->comm[1]->Abort();
}

}  // namespace
}  // namespace elastic::trainer
