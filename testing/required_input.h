// A test input that is not there: the shared data sets, or the Python that
// tools/setup.sh installs. On a developer's machine the test is skipped,
// saying what is missing; under CI=true (.ci/run exports it, .bazelrc passes
// it to tests) it fails, because a suite whose data tests skip silently is
// green without having tested them.
#pragma once

#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

namespace elastic::test_inputs {

inline bool InContinuousIntegration() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::strcmp(ci, "true") == 0;
}

}  // namespace elastic::test_inputs

// Use at the top of a test body: ELASTIC_REQUIRE_INPUT(!dir.empty(), "X names no data");
// `what` may be a stream chain ("a" << b).
#define ELASTIC_REQUIRE_INPUT(present, what)                                         \
  if (present) {                                                                     \
  } else if (::elastic::test_inputs::InContinuousIntegration())                      \
    FAIL() << "a test input is missing, and CI=true makes that a failure: " << what; \
  else                                                                               \
    GTEST_SKIP() << what
