#include "runtime/fuzz_mutator.h"

#include <cstddef>
#include <cstdlib>
#include <iterator>

namespace elastic::runtime {

void Mutate(FuzzBytes& bytes, std::mt19937& random) {
  static const uint32_t kInteresting[] = {
      0, 1, 2, 511, 512, 513, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff, 0x1fffffff, 1 << 17};
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(random); };
  switch (pick(6)) {
    case 0:  // flip a bit
      if (!bytes.empty()) bytes[pick(bytes.size())] ^= static_cast<uint8_t>(1u << pick(8));
      break;
    case 1:  // an interesting 32-bit value at a word boundary (sizes, counts, pointers)
      if (bytes.size() >= 4) {
        const size_t at = pick(bytes.size() / 4) * 4;
        const uint32_t value = kInteresting[pick(std::size(kInteresting))];
        for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(value >> (8 * i));
      }
      break;
    case 2:  // truncate
      if (!bytes.empty()) bytes.resize(pick(bytes.size()));
      break;
    case 3:  // insert random bytes
      for (size_t i = 0, n = 1 + pick(16); i < n; ++i) {
        bytes.insert(bytes.begin() + static_cast<ptrdiff_t>(pick(bytes.size() + 1)),
                     static_cast<uint8_t>(pick(256)));
      }
      break;
    case 4:  // random byte
      if (!bytes.empty()) bytes[pick(bytes.size())] = static_cast<uint8_t>(pick(256));
      break;
    case 5:  // duplicate a tail (two inputs back to back, or a partial second one)
      if (!bytes.empty()) {
        const size_t from = pick(bytes.size());
        FuzzBytes tail(bytes.begin() + static_cast<ptrdiff_t>(from), bytes.end());
        bytes.insert(bytes.end(), tail.begin(), tail.end());
      }
      break;
  }
}

long FuzzIterations(long fallback) {
  const char* configured = std::getenv("FUZZ_ITERATIONS");
  return configured != nullptr ? std::atol(configured) : fallback;
}

void FuzzSeeds(const std::vector<FuzzBytes>& seeds, long iterations,
               int (*target)(const uint8_t*, size_t)) {
  std::mt19937 random(20261122);
  for (long i = 0; i < iterations; ++i) {
    FuzzBytes input = seeds[static_cast<size_t>(i) % seeds.size()];
    const int mutations = 1 + static_cast<int>(random() % 4);
    for (int m = 0; m < mutations; ++m) Mutate(input, random);
    target(input.data(), input.size());
  }
}

}  // namespace elastic::runtime
