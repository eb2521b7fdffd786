// A test whose input is never there, for required_input_test.sh: it must be
// skipped without CI and fail under CI=true.
#include <filesystem>

#include "gtest/gtest.h"
#include "testing/required_input.h"

TEST(RequiredInputProbe, NeedsAFileThatIsNotThere) {
  const char* path = "/nonexistent/elastic-required-input";
  ELASTIC_REQUIRE_INPUT(std::filesystem::exists(path), path << " is missing");
  SUCCEED();
}
