#include "trainer/allocator.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace elastic::trainer {
namespace {

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// One "training step": a few activation-sized blocks, written, then freed.
void AllocateTouchFree() {
  constexpr size_t kBlock = size_t{6} << 20;
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) {
    void* block = std::malloc(kBlock);
    ASSERT_NE(block, nullptr);
    std::memset(block, i + 1, kBlock);
    blocks.push_back(block);
  }
  for (void* block : blocks) std::free(block);
}

// With glibc's defaults every iteration below faults its 24 MiB in again
// (about 6,000 pages; checked by removing the call); kept memory is faulted
// in once.
TEST(AllocatorTest, FreedStepMemoryIsReusedWithoutNewPageFaults) {
  ::unsetenv("GLIBC_TUNABLES");
  KeepFreedMemoryForReuse();
  AllocateTouchFree();  // the first step maps its memory
  const long before = MinorFaults();
  constexpr int kSteps = 20;
  for (int step = 0; step < kSteps; ++step) AllocateTouchFree();
  const long pages_per_step = (long{4} * (6 << 20)) / 4096;
  EXPECT_LT(MinorFaults() - before, pages_per_step) << "freed blocks went back to the kernel";
}

}  // namespace
}  // namespace elastic::trainer
