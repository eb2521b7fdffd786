// The state-transfer decoder's fuzz entry point, in libFuzzer's signature:
// the bytes are what rank 0 broadcasts at a generation's start and what the
// controller's copy holds (a sealed Commit, commit_state.h), opened under the
// fuzz token and restored into a ResNet-8 learner as a worker does.
// state_fuzz_test drives it in CI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace elastic::trainer {

// The token the target opens states with.
inline constexpr char kStateFuzzToken[] = "state-fuzz-token-0123456789abcdef";

// The learner's own state, unsealed (what Commit::learner holds).
std::string StateFuzzLearnerState();

}  // namespace elastic::trainer

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
