// The control plane's fuzz entry point, in libFuzzer's signature: the first
// byte picks a direction of control.capnp (even: ToTrainer, odd:
// ToController), the rest is the message as an actor call carries it. The
// worker's trainer actor receives a ToTrainer (TrainerInbox::Receive, the real
// dispatch); a ToController is read in full, as the controller reads it (the
// switch on its member, every pointer, the conversions to plain structs). control_fuzz_test drives
// it in CI; link it with clang -fsanitize=fuzzer for a real fuzzing run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace elastic::trainer {

// The number of kinds the first byte picks from (modulo): the two unions.
inline constexpr int kControlFuzzKinds = 2;
inline constexpr int kFuzzToTrainer = 0;
inline constexpr int kFuzzToController = 1;

// A fuzz input: the kind byte, then the payload.
std::string ControlFuzzInput(int kind, const std::string& payload);

}  // namespace elastic::trainer

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
