// Real child processes for multi-process tests: fork/exec of this same binary
// with a role flag. A child that is still running when its handle is destroyed
// is killed, so a failing test never leaves processes behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace elastic::collectives::testing {

class ChildProcess {
 public:
  // Starts /proc/self/exe (resolved) with `args` (not including argv[0]).
  static ChildProcess SpawnSelf(const std::vector<std::string>& args);
  static ChildProcess Spawn(const std::string& binary, const std::vector<std::string>& args);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ~ChildProcess();

  pid_t pid() const { return pid_; }

  // Waits for exit; returns the wait status, or nullopt if it is still running
  // after `timeout`.
  std::optional<int> WaitFor(std::chrono::milliseconds timeout);
  void Kill(int signal);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// "exited with 0", "exited with 3", "killed by signal 9".
std::string DescribeStatus(int status);
bool ExitedCleanly(int status);

// Number of open descriptors / threads of this process (from /proc/self).
int CountOpenFds();
int CountThreads();

// A fresh directory under $TEST_TMPDIR (or /tmp).
std::string MakeTempDir(const std::string& prefix);

}  // namespace elastic::collectives::testing
