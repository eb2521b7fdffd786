// A child process a test starts (a Prometheus server) and is sure to end:
// stopped on destruction, and killed by the kernel if the test dies first.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace elastic::monitoring::testing {

class ChildProcess {
 public:
  // Starts argv[0] (an absolute path) with stdout and stderr appended to
  // log_path. Throws std::runtime_error when it cannot be started.
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path);
  // Stop().
  ~ChildProcess();

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // False once the process has exited (reaps it).
  bool Running();
  // SIGTERM, up to `grace_seconds` to exit, then SIGKILL. Idempotent.
  void Stop(double grace_seconds = 30);
  // The exit status as waitpid reports it; meaningful once Running() is false.
  int wait_status() const { return wait_status_; }
  // The last `bytes` of the log, for failure messages.
  std::string LogTail(size_t bytes = 4000) const;

 private:
  pid_t pid_ = -1;
  int wait_status_ = 0;
  std::string log_path_;
};

// A TCP port on 127.0.0.1 that was free a moment ago: bound with port 0, read
// back and released, for servers that cannot report the port they bound.
int ReserveFreePort();

}  // namespace elastic::monitoring::testing
