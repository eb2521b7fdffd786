// Helpers for tests that run several real processes: the test binary
// re-executes itself (/proc/self/exe) with --role=NAME to play another
// process, so one cc_test holds every side of a scenario.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/head.h"
#include "runtime/head_client.h"

namespace elastic::runtime::testing {

// A role's main: gets the arguments after --role=NAME, returns the exit code.
using RoleMain = std::function<int(const std::vector<std::string>& args)>;

// Registers a role at static-initialisation time:
//   static const bool kRegistered = RegisterRole("waiter", WaiterMain);
bool RegisterRole(const std::string& name, RoleMain main);

// main() of a multi-process test: runs the role named by --role=NAME, or the
// gtest suite when there is none.
int TestMain(int argc, char** argv);

// A child process of the test, killed (SIGKILL) and reaped when destroyed.
// Children die with the test too (PR_SET_PDEATHSIG).
class Subprocess {
 public:
  // Starts /proc/self/exe --role=role args..., with extra environment entries.
  static Subprocess SpawnRole(const std::string& role, const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& environment = {});
  // Starts any binary (argv[0] is the path).
  static Subprocess Spawn(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& environment = {});

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  void Signal(int signal) const;
  // The raw wait status once it exited, or nullopt after timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // Exit code when it exited normally within timeout; -1 otherwise (and it is killed).
  int WaitExitCode(std::chrono::milliseconds timeout);

 private:
  explicit Subprocess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// True when process pid exists (and is not a zombie).
bool ProcessAlive(pid_t pid);
// True when process pid is stopped (SIGSTOP has taken effect).
bool ProcessStopped(pid_t pid);

// The descriptors process pid has open (the numbers under /proc/PID/fd).
std::set<int> OpenDescriptors(pid_t pid);
// The inodes of the sockets process pid has open ("socket:[INODE]" links).
std::set<uint64_t> OpenSockets(pid_t pid);
// /proc/PID/comm: the process name, which a program may set itself (so a test
// can tell that a child has exec'd and reached its main).
std::string ProcessName(pid_t pid);
// The environment process pid was started with (/proc/PID/environ).
std::map<std::string, std::string> ProcessEnvironment(pid_t pid);

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read
// back, closed), for a server that must come back on the same port.
uint16_t FreeLocalPort();
// True when a TCP connection to 127.0.0.1:port is accepted (by a listener or
// a backlog), false when it is refused.
bool CanConnect(uint16_t port);

// Polls predicate every few ms until it holds or timeout passes.
bool WaitUntil(const std::function<bool()>& predicate, std::chrono::milliseconds timeout);

// Options of a client of `head` (hosted in this process): its port and token.
HeadClientOptions ClientOf(const Head& head, const std::string& name = "client");

}  // namespace elastic::runtime::testing
