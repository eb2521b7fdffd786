// The sample invariant's bookkeeping on made-up logs of --log-samples.
#include "tests/job_checks.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace elastic::tests {
namespace {

// Eight samples, two per step. Generation 1 trains positions 0, 2 and 4 and
// commits at 6. Generation 2 restores that commit from its members and
// trains position 6; its workers are lost before the next commit, and
// generation 3 falls back to an older copy at position 4 and trains 4 and 6
// again. Generation 3's restore rolls back generation 1's step at 4 although
// generation 2, in between, restored a later point.
void WriteLogs(const std::string& dir, bool third_generation_retrains) {
  std::ofstream(dir + "/samples-1") << "G 1 0 0\nS 1 0 0 0 1\nS 1 0 2 2 3\nS 1 0 4 4 5\n"
                                       "G 2 0 6\nS 2 0 6 6 7\n";
  std::ofstream(dir + "/samples-2")
      << "G 3 0 4\n"
      << (third_generation_retrains ? "S 3 0 4 4 5\n" : "") << "S 3 0 6 6 7\n";
}

TEST(ExpectEverySampleOnceTest, ARestoreOfAnOlderPointRollsBackEveryLaterStep) {
  const std::string dir = FreshTempDir("job_checks_fallback");
  WriteLogs(dir, true);
  ExpectEverySampleOnce(dir, 8, 1);
}

TEST(ExpectEverySampleOnceTest, TheStepsARestoreRolledBackMustBeTrainedAgain) {
  const std::string dir = FreshTempDir("job_checks_missing");
  WriteLogs(dir, false);
  EXPECT_NONFATAL_FAILURE(ExpectEverySampleOnce(dir, 8, 1), "samples never used in epoch 0");
}

}  // namespace
}  // namespace elastic::tests
