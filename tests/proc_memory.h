// What /proc says about a tree of processes and their memory: how an
// end-to-end test finds the workers a driver started (its descendants, not
// lines of its log) and measures what each one holds.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace elastic::tests {

// Every process below `root`: its children, their children, and so on, from
// the parent pid in each /proc/PID/stat. A snapshot: processes come and go.
std::vector<pid_t> DescendantsOf(pid_t root);

// /proc/PID/cmdline with its NUL separators as spaces; "" once it is gone.
std::string CommandLineOf(pid_t pid);

// Bytes of one process's resident memory, from /proc/PID/smaps_rollup.
struct MemoryUse {
  int64_t rss = 0;  // every resident page it maps, shared ones included
  int64_t pss = 0;  // each page divided by the number of processes mapping it
  // Private_Clean + Private_Dirty: pages no other process maps (its heap,
  // its copies of data, file pages only it has touched).
  int64_t private_bytes = 0;
};

// nullopt when the process is gone or its smaps_rollup cannot be read.
std::optional<MemoryUse> MemoryOf(pid_t pid);

}  // namespace elastic::tests
