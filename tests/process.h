// A child process an end-to-end test starts, with stdout and stderr in a log
// file. Its whole process group is killed when the test lets go of it, so no
// driver, agent or worker outlives a failed test.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <regex>
#include <string>
#include <vector>

namespace elastic::tests {

class Process {
 public:
  // Starts args[0] (a path) in a process group of its own.
  Process(const std::vector<std::string>& args, const std::string& log);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  std::string Output() const;
  pid_t pid() const { return pid_; }

  // True once it has exited; its exit code (-1 when signalled) in *code.
  bool Exited(int* code);
  // The exit code, or -1 when it did not exit within the timeout (or was signalled).
  int Wait(std::chrono::seconds timeout);
  // Waits until the output matches `pattern`; returns the match (empty on timeout).
  std::smatch WaitFor(const std::string& pattern, std::chrono::seconds timeout,
                      const std::function<bool(const std::smatch&)>& accept = nullptr);

 private:
  std::string log_;
  std::string output_;  // keeps the strings a returned smatch points into
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
};

std::string ReadFile(const std::string& path);

// Runs `command` with /bin/sh and waits for it: its stdout and stderr
// together, and in `*ok` whether it exited 0 (a helper script, not a job).
std::string RunShell(const std::string& command, bool* ok);

// A job's output without its per-step progress lines ("epoch E/N step S/T
// ..."): what a failed assertion prints, so that the events that matter fit
// in a CI log that keeps only the head and the tail of what a test printed.
std::string WithoutProgress(const std::string& output);

// True while `pid` runs. kill(pid, 0) also succeeds on a zombie that its
// parent (a node agent, for workers) has not reaped yet: this does not.
bool IsRunning(pid_t pid);

}  // namespace elastic::tests
