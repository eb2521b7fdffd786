// Paths of a test's `data` files under Bazel's runfiles tree.
#pragma once

#include <string>

namespace elastic::monitoring::testing {

// `workspace_path` relative to the repository root, e.g.
// "monitoring/prometheus.yml". Throws std::runtime_error naming the path when
// the file is not there (not listed in `data`, or not run by bazel test).
std::string RunfilePath(const std::string& workspace_path);

// The whole file; throws std::runtime_error naming it when it cannot be read.
std::string ReadTextFile(const std::string& path);

// $TEST_TMPDIR, or /tmp outside Bazel.
std::string TestTempDir();

}  // namespace elastic::monitoring::testing
