// The control plane's fuzz entry point, in libFuzzer's signature: the first
// byte picks a message kind of control.capnp, the rest is its payload as an
// actor call carries it. The worker's trainer actor receives its three kinds
// (TrainerInbox::Receive, the real dispatch); every kind the controller
// receives is read in full, as the controller reads it (every pointer, the
// conversions to plain structs). control_fuzz_test drives it in CI; link it
// with clang -fsanitize=fuzzer for a real fuzzing run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace elastic::trainer {

// The number of message kinds the first byte picks from (modulo).
inline constexpr int kControlFuzzKinds = 15;

// A fuzz input: the kind byte, then the payload.
std::string ControlFuzzInput(int kind, const std::string& payload);

}  // namespace elastic::trainer

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
