// A build without CUDA and NCCL: the NCCL backend is there and says, on every
// use, that this build lacks it.
#include <gtest/gtest.h>

#include <string>

#include "collectives/nccl_communicator.h"
#include "collectives/testing/test_store.h"

namespace elastic::collectives {
namespace {

TEST(NcclUnavailableTest, EveryUseSaysTheBuildHasNoNccl) {
  std::string why;
  EXPECT_FALSE(CudaDeviceAvailable(&why));
  EXPECT_NE(why.find("this build has no NCCL"), std::string::npos) << why;
  testing::TestHead head;
  auto store = testing::OpenStore(head.spec(), "rank-0");
  NcclCommunicatorFactory factory(*store);
  try {
    factory.Create({1, 0, 1});
    FAIL() << "created an NCCL communicator without NCCL";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("/usr/local/cuda"), std::string::npos) << e.what();
  }
  EXPECT_EQ(NcclUniqueIdKey(3, "grad"), runtime::GenerationKey(3, "nccl/grad/unique_id"));
}

}  // namespace
}  // namespace elastic::collectives
