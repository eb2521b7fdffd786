#include "runtime/preforked_workers.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "runtime/worker_order.capnp.h"

namespace elastic::runtime {
namespace {

void CloseRange(unsigned first, unsigned last) {
  if (first > last) return;
#ifdef SYS_close_range
  if (syscall(SYS_close_range, first, last, 0U) == 0) return;
#endif
  const unsigned end = last == ~0U ? 65536U : last;
  for (unsigned fd = first; fd <= end; ++fd) close(static_cast<int>(fd));
}

// The child, from fork to the worker's main; it never returns. Runs in a copy
// of a single-threaded process, so it may call anything.
[[noreturn]] void WaitForOrderAndRun(int order_fd, const PreforkedWorkers::Entry& entry) {
  // Nothing of the parent's stays open but stdio and this socket; the
  // parent's own descriptors (a log file, the other children's sockets) are
  // not the worker's.
  CloseRange(3, static_cast<unsigned>(order_fd) - 1);
  CloseRange(static_cast<unsigned>(order_fd) + 1, ~0U);
  std::vector<std::string> args;
  std::vector<std::string> environment;
  try {
    capnp::StreamFdMessageReader reader(order_fd);
    const proto::WorkerOrder::Reader order = reader.getRoot<proto::WorkerOrder>();
    for (const capnp::Text::Reader arg : order.getArgs()) args.emplace_back(arg.cStr());
    for (const capnp::Text::Reader entry : order.getEnvironment()) {
      environment.emplace_back(entry.cStr());
    }
  } catch (...) {
    _exit(0);  // no order: the agent stopped, or took fewer workers than it made
  }
  close(order_fd);
  if (args.empty()) _exit(127);
  clearenv();
  // putenv keeps the pointer: the strings live as long as the process.
  for (const std::string& entry : environment) putenv(strdup(entry.c_str()));
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  std::exit(entry(args));
}

}  // namespace

int ThreadsOfThisProcess() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return 0;
}

PreforkedWorkers::PreforkedWorkers(uint32_t count, Entry entry) {
  if (count == 0) return;
  const int threads = ThreadsOfThisProcess();
  if (threads != 1) {
    why_none_ = "this process has " + std::to_string(threads) +
                " threads (fork is safe only with one): workers are exec'd";
    return;
  }
  // A child inherits unwritten stdio buffers: it would print them again.
  std::fflush(nullptr);
  const pid_t parent = getpid();
  for (uint32_t i = 0; i < count; ++i) {
    int fds[2];
    // A socket, not a pipe: the parent writes with MSG_NOSIGNAL, so a child
    // that died is an error here rather than a SIGPIPE.
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      why_none_ = std::string("socketpair: ") + std::strerror(errno);
      break;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      why_none_ = std::string("fork: ") + std::strerror(errno);
      close(fds[0]);
      close(fds[1]);
      break;
    }
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(0);  // the parent died before prctl
      WaitForOrderAndRun(fds[1], entry);
    }
    setpgid(pid, pid);  // also from here, so the group exists before anyone signals it
    close(fds[1]);
    waiting_.push_back(Child{pid, fds[0]});
  }
}

PreforkedWorkers::~PreforkedWorkers() {
  std::lock_guard<std::mutex> lock(mutex_);
  // A child without an order has nothing to finish: ended outright, so the
  // wait below is bounded even for one that is stopped.
  for (const Child& child : waiting_) {
    close(child.order_fd);
    kill(child.pid, SIGKILL);
  }
  for (const Child& child : waiting_) waitpid(child.pid, nullptr, 0);
}

size_t PreforkedWorkers::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waiting_.size();
}

pid_t PreforkedWorkers::Take(const std::vector<std::string>& args,
                             const std::vector<std::string>& environment) {
  capnp::MallocMessageBuilder message;
  proto::WorkerOrder::Builder order = message.initRoot<proto::WorkerOrder>();
  auto args_list = order.initArgs(static_cast<unsigned>(args.size()));
  for (size_t i = 0; i < args.size(); ++i) args_list.set(static_cast<unsigned>(i), args[i]);
  auto env_list = order.initEnvironment(static_cast<unsigned>(environment.size()));
  for (size_t i = 0; i < environment.size(); ++i) {
    env_list.set(static_cast<unsigned>(i), environment[i]);
  }
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();

  std::lock_guard<std::mutex> lock(mutex_);
  while (!waiting_.empty()) {
    const Child child = waiting_.front();
    waiting_.pop_front();
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n =
          send(child.order_fd, bytes.begin() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    close(child.order_fd);
    if (sent == bytes.size()) return child.pid;
    // The child is gone (or its socket failed): try the next one.
    kill(-child.pid, SIGKILL);
    waitpid(child.pid, nullptr, 0);
  }
  return 0;
}

}  // namespace elastic::runtime
