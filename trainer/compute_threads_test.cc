#include "trainer/compute_threads.h"

#include <torch/torch.h>

#include "gtest/gtest.h"

namespace elastic::trainer {
namespace {

TEST(ComputeThreadsTest, SetsLibTorchsAndOpenBlassThreads) {
  // A matrix product first, so that LibTorch has loaded and used its BLAS.
  (void)torch::mm(torch::ones({64, 64}), torch::ones({64, 64}));
  SetComputeThreads(1);
  EXPECT_EQ(torch::get_num_threads(), 1);
  // Debian's libblas.so.3 is OpenBLAS on every machine tools/setup.sh
  // prepares; another BLAS has no pool of its own to set.
  if (BlasThreads() == 0) GTEST_SKIP() << "this process has no OpenBLAS";
  EXPECT_EQ(BlasThreads(), 1);
  SetComputeThreads(2);
  EXPECT_EQ(torch::get_num_threads(), 2);
  EXPECT_EQ(BlasThreads(), 2);
}

}  // namespace
}  // namespace elastic::trainer
