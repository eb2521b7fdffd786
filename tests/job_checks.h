// What the end-to-end tests of //trainer:cifar share besides Process: a fresh
// directory per scenario and the checksum invariant read off a job's output.
#pragma once

#include <string>

namespace elastic::tests {

// An empty directory `name` under $TEST_TMPDIR (or /tmp outside Bazel).
std::string FreshTempDir(const std::string& name);

// Every generation's ranks logged one and the same parameter checksum after
// their sync ("params generation=G rank=R world=W checksum=C"), at least one
// generation did, and no worker reported a mismatch. Google Test expectations.
void ExpectOneChecksumPerGeneration(const std::string& output);

}  // namespace elastic::tests
