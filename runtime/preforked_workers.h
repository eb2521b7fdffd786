// Workers forked in advance from a process image that is still single-threaded,
// each waiting for the command line and environment of the worker it is to
// become.
//
// Why: a node agent started by `cifar --join` has already paid the dynamic
// loading and static initialisation of LibTorch (~0.75 s here, ~300 shared
// libraries); a worker it fork+execs pays them again before it can register.
// A worker forked from the agent's image before the agent started a thread
// skips that: it only waits on a pipe. fork() in a process with one thread is
// safe for any code that follows; after threads exist it is not, which is why
// the children are made at start and no later (and why none are made when the
// process already has a second thread).
//
// A child that is never given an order (the agent stopped first) exits 0 at
// the socket's end of file, and is killed outright when the PreforkedWorkers
// goes away; PR_SET_PDEATHSIG=SIGKILL ends it with the thread that forked it. A child that is given
// one becomes the worker: same pid, its own process group, the order's environment, a signal mask
// with nothing blocked, every descriptor above stdio closed, and `entry(args)` as its main.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace elastic::runtime {

class PreforkedWorkers {
 public:
  // The worker's main: called in the child with the order's argv; its result
  // is the child's exit status.
  using Entry = std::function<int(const std::vector<std::string>& args)>;

  // Forks `count` children when this process has exactly one thread;
  // otherwise forks none (why_none() says why). Call from the thread that
  // will outlive the workers (the children die with it).
  PreforkedWorkers(uint32_t count, Entry entry);
  // Children not given an order are ended (SIGKILL) and reaped.
  ~PreforkedWorkers();
  PreforkedWorkers(const PreforkedWorkers&) = delete;
  PreforkedWorkers& operator=(const PreforkedWorkers&) = delete;

  // Hands the next waiting child its worker's argv (argv[0] included) and
  // whole environment (NAME=VALUE); returns the child's pid, or 0 when no
  // child waits (the caller then fork+execs as usual). Thread-safe.
  pid_t Take(const std::vector<std::string>& args, const std::vector<std::string>& environment);

  size_t waiting() const;
  const std::string& why_none() const { return why_none_; }

 private:
  struct Child {
    pid_t pid;
    int order_fd;  // the write end of the child's pipe
  };

  mutable std::mutex mutex_;
  std::deque<Child> waiting_;
  std::string why_none_;
};

// Threads of this process, from /proc/self/status (0 when it cannot be read).
int ThreadsOfThisProcess();

}  // namespace elastic::runtime
