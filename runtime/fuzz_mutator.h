// The byte mutations the fuzz tests apply to valid inputs (frames, control
// messages, state transfers): the deterministic stand-in for libFuzzer's
// mutator, so that CI fuzzes every run without clang.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace elastic::runtime {

using FuzzBytes = std::vector<uint8_t>;

// One random mutation: a flipped bit, an interesting 32-bit value (sizes,
// counts, pointers) at a word boundary, a truncation, inserted random bytes,
// a random byte, or a duplicated tail.
void Mutate(FuzzBytes& bytes, std::mt19937& random);

// FUZZ_ITERATIONS from the environment, else `fallback`.
long FuzzIterations(long fallback);

// Runs `target` (libFuzzer's signature) on `iterations` inputs, each a seed
// (in turn) with 1 to 4 mutations, from a fixed random seed: a failure
// reproduces.
void FuzzSeeds(const std::vector<FuzzBytes>& seeds, long iterations,
               int (*target)(const uint8_t*, size_t));

}  // namespace elastic::runtime
