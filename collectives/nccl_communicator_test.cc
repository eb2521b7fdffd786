// The NCCL backend. The unique-id exchange through the runtime's key-value
// store needs no GPU and always runs; the communicator tests need a CUDA device
// and skip, saying so, where there is none.
#include "collectives/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "collectives/testing/test_store.h"

namespace elastic::collectives {
namespace {

TEST(NcclCommunicatorTest, UniqueIdIsExchangedThroughTheStorePerGeneration) {
  testing::TestHead head;
  constexpr int kWorld = 3;
  auto exchange = [&](uint64_t generation) {
    std::vector<std::string> ids(kWorld);
    std::vector<std::thread> threads;
    // Ranks 1..n-1 start waiting before rank 0 publishes.
    for (int rank = kWorld - 1; rank >= 0; --rank) {
      threads.emplace_back([&, rank] {
        auto store = testing::OpenStore(head.spec(), "rank-" + std::to_string(rank));
        ids[rank] = ExchangeNcclUniqueId(*store, {generation, rank, kWorld}, "world",
                                         std::chrono::seconds(60));
      });
    }
    for (auto& t : threads) t.join();
    return ids;
  };
  const uint64_t before = head.stats().messages_received;
  const auto first = exchange(1);
  // One Put by rank 0 and one Wait by each other rank: linear in the world.
  EXPECT_EQ(head.stats().messages_received - before, static_cast<uint64_t>(kWorld));
  for (const auto& id : first) EXPECT_EQ(id, first[0]);
  EXPECT_EQ(first[0].size(), 128u);
  const auto second = exchange(2);
  EXPECT_EQ(second[1], second[0]);
  EXPECT_NE(second[0], first[0]) << "a new generation must get a fresh unique id";
}

TEST(NcclCommunicatorTest, MissingRankZeroIsATimeoutNamingTheKey) {
  testing::TestHead head;
  auto store = testing::OpenStore(head.spec(), "rank-1");
  try {
    ExchangeNcclUniqueId(*store, {9, 1, 2}, "world", std::chrono::milliseconds(300));
    FAIL() << "no timeout";
  } catch (const CollectiveTimeout& e) {
    EXPECT_NE(std::string(e.what()).find(NcclUniqueIdKey(9, "world")), std::string::npos);
  }
}

TEST(NcclCommunicatorTest, WorldOfOneOnTheGpuReducesRebuildsAndAborts) {
  std::string why;
  if (!CudaDeviceAvailable(&why)) GTEST_SKIP() << "skipped, needs a GPU: " << why;
  testing::TestHead head;
  auto store = testing::OpenStore(head.spec(), "rank-0");
  NcclCommunicatorFactory factory(*store);
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 1024 * sizeof(float)), cudaSuccess);
  std::vector<float> host(1024, 3.0f);
  for (uint64_t generation = 0; generation < 5; ++generation) {
    auto comm = factory.Create({generation, 0, 1});
    ASSERT_EQ(cudaMemcpy(device, host.data(), 4096, cudaMemcpyHostToDevice), cudaSuccess);
    comm->Allreduce(device, 1024, DataType::kFloat32, ReduceOp::kAverage);
    comm->Barrier();
    std::vector<float> back(1024);
    ASSERT_EQ(cudaMemcpy(back.data(), device, 4096, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back[1023], 3.0f);
  }
  auto comm = factory.Create({5, 0, 1});
  comm->Abort();
  EXPECT_THROW(comm->Barrier(), CollectiveAborted);
  cudaFree(device);
}

}  // namespace
}  // namespace elastic::collectives
