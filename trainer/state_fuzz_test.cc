// Runs the state-transfer decoder's fuzz target (state_fuzz.cc) over a
// bounded number of deterministic mutations of a real sealed learner state,
// so CI fuzzes every run without clang. FUZZ_ITERATIONS overrides the count.
#include "trainer/state_fuzz.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/fuzz_mutator.h"
#include "trainer/commit_state.h"

namespace elastic::trainer {
namespace {

using runtime::FuzzBytes;

std::string Sealed() {
  Commit commit;
  commit.seen = 128;
  commit.learner = StateFuzzLearnerState();
  return commit.Seal(kStateFuzzToken);
}

TEST(StateFuzzTest, ASealedStateRestores) {
  const std::string sealed = Sealed();
  EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(sealed.data()), sealed.size()),
            0);
  EXPECT_EQ(StateFuzzLearnerState(), Commit::Open(kStateFuzzToken, sealed, "test").learner)
      << "restoring its own state changed the learner";
}

TEST(StateFuzzTest, MutatedStatesNeverCrashTheDecoder) {
  const std::string sealed = Sealed();
  const long iterations = runtime::FuzzIterations(20000);
  runtime::FuzzSeeds({FuzzBytes(sealed.begin(), sealed.end())}, iterations, LLVMFuzzerTestOneInput);
  SUCCEED() << iterations << " mutated states restored or refused cleanly";
}

}  // namespace
}  // namespace elastic::trainer
