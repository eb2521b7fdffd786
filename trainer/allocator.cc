#include "trainer/allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace elastic::trainer {

void KeepFreedMemoryForReuse() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return;
  // 32 MiB is the largest mmap threshold glibc accepts; a fixed value also
  // turns off its dynamic threshold, whose trim threshold (twice the largest
  // block freed so far) still returned the top of the heap after each step.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

}  // namespace elastic::trainer
