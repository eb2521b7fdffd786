// The frame decoder's fuzz entry point, in libFuzzer's signature so the same
// function can be linked into a libFuzzer binary (clang -fsanitize=fuzzer) or
// driven by frame_fuzz_test's deterministic mutation loop in CI.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
