#include "runtime/node_agent.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "runtime/auth.h"
#include "runtime/head_reconnect.h"
#include "runtime/log.h"

extern char** environ;

namespace elastic::runtime {
namespace {

std::string ResolveBinary(const std::string& binary) {
  if (binary != "/proc/self/exe") return binary;
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0)
    throw std::runtime_error("cannot resolve /proc/self/exe: " + std::string(std::strerror(errno)));
  return std::string(path, static_cast<size_t>(n));
}

HeadClientOptions HeadOptionsOf(const NodeAgentOptions& options) {
  HeadClientOptions client;
  client.host = options.head_host;
  client.port = options.head_port;
  client.token = options.token;
  client.name = "node-agent " + options.name;
  client.transport = options.transport;
  return client;
}

constexpr auto kPollInterval = std::chrono::milliseconds(20);
// How often an agent that lost its head tries to reach it again.

// One past the largest descriptor this process can hold (the RLIMIT_NOFILE
// soft limit). Read before fork: getrlimit is not async-signal-safe by POSIX.
int DescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY ||
      limit.rlim_cur > static_cast<rlim_t>(INT_MAX)) {
    return 1 << 20;  // the kernel's default ceiling (fs.nr_open)
  }
  return static_cast<int>(limit.rlim_cur);
}

// In the child between fork and exec, so async-signal-safe calls only.
// Closes every descriptor above stdio whatever its close-on-exec flag, so a
// worker holds nothing of the agent's process: not the listening socket of a
// head in the same process (its port would stay open after the head is
// gone), no connection, no file another library opened without O_CLOEXEC.
void CloseDescriptorsAboveStdio(int limit) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
#endif
  // No close_range (Linux < 5.9): close them one by one.
  for (int fd = 3; fd < limit; ++fd) close(fd);
}

}  // namespace

NodeAgent::NodeAgent(NodeAgentOptions options)
    : options_(std::move(options)), binary_path_(ResolveBinary(options_.binary)) {
  if (options_.head_reconnect_timeout.count() < 0) {
    throw std::invalid_argument("NodeAgentOptions.head_reconnect_timeout must not be negative");
  }
  ConnectToHead(options_.transport.connect_timeout);
  supervisor_ = std::thread([this] { SupervisorLoop(); });
}

NodeAgent::~NodeAgent() {
  StopWorkers();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  supervisor_.join();
  // Closed here, while the members its disconnect callback uses still exist,
  // and without mutex_ held (the callback takes it on the client's thread).
  std::shared_ptr<HeadClient> head;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    head = std::move(head_);
  }
  head.reset();
}

std::string NodeAgent::HeadAddress() const {
  return options_.head_host + ":" + std::to_string(options_.head_port);
}

void NodeAgent::ConnectToHead(std::chrono::milliseconds connect_timeout) {
  HeadClientOptions client_options = HeadOptionsOf(options_);
  client_options.transport.connect_timeout = connect_timeout;
  auto client = std::make_shared<HeadClient>(client_options);
  // After a head restart: the same node id, which its workers registered under.
  const uint64_t node_id = client->RegisterNode(options_.name, 0, node_id_.load());
  std::shared_ptr<HeadClient> replaced;  // destroyed after the lock is released
  uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    epoch = ++head_epoch_;
    replaced = std::move(head_);
    head_ = client;
    node_id_.store(node_id);
    head_lost_at_.reset();
    head_lost_reason_.clear();
  }
  // Registered last: when the connection is already gone, it runs at once.
  client->OnDisconnect([this, epoch](const std::string& reason) { OnHeadLost(epoch, reason); });
}

void NodeAgent::OnHeadLost(uint64_t epoch, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (epoch != head_epoch_ || head_lost_at_) return;  // a replaced client, or known already
    head_lost_at_ = Clock::now();
    head_lost_reason_ = reason;
  }
  changed_.notify_all();
}

std::shared_ptr<HeadClient> NodeAgent::CurrentHead() {
  std::lock_guard<std::mutex> lock(mutex_);
  return head_;
}

bool NodeAgent::head_connected() {
  std::shared_ptr<HeadClient> head;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (head_lost_at_) return false;
    head = head_;
  }
  return head != nullptr && head->connected();
}

std::string NodeAgent::head_failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  return head_failure_;
}

void NodeAgent::SupervisorLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    while (!commands_.empty()) {
      auto command = std::move(commands_.front());
      commands_.pop_front();
      lock.unlock();
      command();
      lock.lock();
    }
    if (stopping_ && running_.empty()) return;
    lock.unlock();
    ReapExited();
    WatchHead();
    if (kill_at_ && Clock::now() >= *kill_at_) {
      kill_at_.reset();
      for (pid_t pid : running_workers()) {
        ELASTIC_LOG(kWarning, "node-agent",
                    "worker pid " << pid << " ignored SIGTERM for " << options_.grace.count()
                                  << " ms; killing it");
        kill(-pid, SIGKILL);
      }
    }
    lock.lock();
    changed_.wait_for(lock, kPollInterval, [this] { return !commands_.empty(); });
  }
}

void NodeAgent::WatchHead() {
  std::shared_ptr<HeadClient> lost;
  Clock::time_point lost_at;
  std::string reason;
  size_t workers = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!head_lost_at_ || !head_failure_.empty() || stopping_) return;
    lost_at = *head_lost_at_;
    reason = head_lost_reason_;
    lost = std::move(head_);  // set only the first time round after the loss
    workers = running_.size();
  }
  if (lost) {
    // Dropped on this thread, never on the client's own loop thread.
    lost.reset();
    ELASTIC_LOG(kWarning, "node-agent",
                "lost the connection to the head at "
                    << HeadAddress() << " (" << reason << "); keeping " << workers
                    << " workers running and reconnecting every " << kHeadReconnectInterval.count()
                    << " ms for up to " << options_.head_reconnect_timeout.count() << " ms");
    next_reconnect_ = Clock::now();
    last_reconnect_error_.clear();
  }
  const Clock::time_point now = Clock::now();
  if (now < next_reconnect_) return;
  const HeadReconnectWindow window(lost_at, options_.head_reconnect_timeout);
  if (!window.Open(now)) {
    GiveUpOnHead(last_reconnect_error_);
    return;
  }
  next_reconnect_ = now + kHeadReconnectInterval;
  try {
    ConnectToHead(window.AttemptBudget(now, options_.transport.connect_timeout));
  } catch (const std::exception& e) {
    last_reconnect_error_ = e.what();
    ELASTIC_LOG(kDebug, "node-agent", "reconnecting to the head: " << e.what());
    return;
  }
  ELASTIC_LOG(
      kInfo, "node-agent",
      "reconnected to the head at "
          << HeadAddress() << " after "
          << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - lost_at).count()
          << " ms; registered again as node " << node_id_.load() << "; " << running_workers().size()
          << " workers kept running");
  std::vector<UnreportedExit> unreported;
  unreported.swap(unreported_);
  for (const UnreportedExit& exit : unreported) ReportExit(exit);
}

void NodeAgent::GiveUpOnHead(const std::string& last_error) {
  const std::string failure =
      "lost the head at " + HeadAddress() + " and could not reconnect within " +
      std::to_string(options_.head_reconnect_timeout.count()) + " ms (head_reconnect_timeout)" +
      (last_error.empty() ? "" : "; last attempt: " + last_error);
  std::vector<pid_t> pids;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    head_failure_ = failure;
    for (const Worker& worker : running_) pids.push_back(worker.pid);
  }
  ELASTIC_LOG(kError, "node-agent", failure << "; stopping " << pids.size() << " workers");
  // As Terminate does, but without waiting: this thread is the one that reaps.
  for (pid_t pid : pids) kill(-pid, SIGTERM);
  kill_at_ = Clock::now() + options_.grace;
  changed_.notify_all();
}

pid_t NodeAgent::ForkWorker(uint32_t index, uint64_t node_id) {
  // Everything the child needs is built before fork: after fork it may only
  // make async-signal-safe calls.
  std::vector<std::string> args = {binary_path_, "--role=worker"};
  args.insert(args.end(), options_.worker_args.begin(), options_.worker_args.end());
  std::map<std::string, std::string> extra = options_.environment;
  extra["ELASTIC_HEAD_ADDRESS"] = HeadAddress();
  extra[kTokenEnvironmentVariable] = options_.token;
  extra["ELASTIC_NODE_ID"] = std::to_string(node_id);
  extra["ELASTIC_WORKER_INDEX"] = std::to_string(index);
  extra["ELASTIC_HEARTBEAT_MS"] = std::to_string(options_.transport.heartbeat_interval.count());
  extra["ELASTIC_HEARTBEAT_TIMEOUT_MS"] =
      std::to_string(options_.transport.heartbeat_timeout.count());
  extra["ELASTIC_HEAD_RECONNECT_MS"] =
      std::to_string(std::max<int64_t>(1, options_.head_reconnect_timeout.count()));
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos && extra.count(entry.substr(0, eq)) > 0) continue;
    env.push_back(entry);
  }
  for (const auto& [key, value] : extra) env.push_back(key + "=" + value);
  std::vector<char*> c_args;
  for (auto& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  std::vector<char*> c_env;
  for (auto& e : env) c_env.push_back(e.data());
  c_env.push_back(nullptr);
  if (options_.preforked != nullptr) {
    const pid_t pid = options_.preforked->Take(args, env);
    if (pid > 0) {
      ELASTIC_LOG(kDebug, "node-agent", "worker " << index << " is preforked pid " << pid);
      return pid;
    }
  }
  const pid_t parent = getpid();
  const int descriptor_limit = DescriptorLimit();

  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the agent died before prctl
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // the agent may block SIGTERM
    CloseDescriptorsAboveStdio(descriptor_limit);
    execve(c_args[0], c_args.data(), c_env.data());
    _exit(127);
  }
  setpgid(pid, pid);  // also from here, so the group exists before we signal it
  return pid;
}

std::vector<pid_t> NodeAgent::SpawnWorkers(uint32_t count) {
  auto spawned = std::make_shared<std::promise<std::vector<pid_t>>>();
  auto future = spawned->get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || drained_) throw std::logic_error("node agent is stopping; no new workers");
    if (!head_failure_.empty()) {
      throw std::logic_error("node agent gave up on its head; no new workers: " + head_failure_);
    }
    commands_.push_back([this, count, spawned] {
      std::vector<pid_t> pids;
      try {
        for (uint32_t i = 0; i < count; ++i) {
          uint32_t index;
          {
            std::lock_guard<std::mutex> lock(mutex_);
            index = next_index_++;
          }
          // The node id of the head registered with now (this thread is the
          // one that registers again after a head restart).
          const uint64_t node_id = node_id_.load();
          const pid_t pid = ForkWorker(index, node_id);
          {
            std::lock_guard<std::mutex> lock(mutex_);
            running_.push_back(Worker{index, pid, node_id});
          }
          ELASTIC_LOG(kInfo, "node-agent", "started worker " << index << " as pid " << pid);
          pids.push_back(pid);
        }
        spawned->set_value(pids);
      } catch (...) {
        spawned->set_exception(std::current_exception());
      }
    });
  }
  changed_.notify_all();
  return future.get();
}

void NodeAgent::ReportExit(const UnreportedExit& unreported) {
  const WorkerExit& exit = unreported.exit;
  if (std::shared_ptr<HeadClient> head = CurrentHead()) {
    try {
      head->ReportExit(unreported.node_id, exit.worker_index, exit.pid, exit.exit_code,
                       exit.signal);
      return;
    } catch (const std::exception& e) {
      if (head->connected()) {
        // The head is there but answered with an error or late: it may have
        // it, so it is not sent again.
        ELASTIC_LOG(kWarning, "node-agent", "cannot report exit to head: " << e.what());
        return;
      }
    }
  }
  if (!head_failure().empty()) {
    ELASTIC_LOG(kInfo, "node-agent",
                "exit of worker " << exit.worker_index << " not reported: no head any more");
    return;
  }
  ELASTIC_LOG(kInfo, "node-agent",
              "no head to report the exit of worker " << exit.worker_index << " to; it goes to "
                                                      << "the head the agent reconnects to");
  unreported_.push_back(unreported);
}

void NodeAgent::ReapExited() {
  std::vector<Worker> candidates;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    candidates = running_;
  }
  for (const Worker& worker : candidates) {
    int status = 0;
    if (waitpid(worker.pid, &status, WNOHANG) != worker.pid) continue;
    WorkerExit exit{worker.index, worker.pid, -1, 0};
    if (WIFEXITED(status)) exit.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
    // The worker's own children (its process group) go with it.
    kill(-worker.pid, SIGKILL);
    ELASTIC_LOG(kInfo, "node-agent",
                "worker " << exit.worker_index << " (pid " << exit.pid << ") exited: code "
                          << exit.exit_code << " signal " << exit.signal);
    // Under the node id the worker was started with, also after the agent
    // registered again with a restarted head: that is the id the worker
    // registers as a member with, and the head finds the member of an exit
    // by (node id, pid).
    ReportExit(UnreportedExit{exit, worker.node_id});
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = running_.begin(); it != running_.end(); ++it) {
        if (it->pid == worker.pid) {
          running_.erase(it);
          break;
        }
      }
      exits_.push_back(exit);
    }
    changed_.notify_all();
  }
}

std::vector<pid_t> NodeAgent::running_workers() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<pid_t> pids;
  for (const auto& worker : running_) pids.push_back(worker.pid);
  return pids;
}

std::vector<WorkerExit> NodeAgent::exits() {
  std::lock_guard<std::mutex> lock(mutex_);
  return exits_;
}

bool NodeAgent::WaitForWorkers(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [this] { return running_.empty(); });
}

void NodeAgent::Terminate() {
  std::vector<pid_t> pids = running_workers();
  for (pid_t pid : pids) kill(-pid, SIGTERM);
  if (!WaitForWorkers(options_.grace)) {
    for (pid_t pid : running_workers()) {
      ELASTIC_LOG(kWarning, "node-agent",
                  "worker pid " << pid << " ignored SIGTERM for " << options_.grace.count()
                                << " ms; killing it");
      kill(-pid, SIGKILL);
    }
    WaitForWorkers(std::chrono::milliseconds(30000));
  }
}

void NodeAgent::Drain(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (drained_) return;
    drained_ = true;
  }
  ELASTIC_LOG(kInfo, "node-agent", "draining: " << reason);
  if (std::shared_ptr<HeadClient> head = CurrentHead()) {
    try {
      head->ReportDraining(node_id_.load(), reason);
    } catch (const std::exception& e) {
      ELASTIC_LOG(kWarning, "node-agent", "cannot tell the head we are draining: " << e.what());
    }
  } else {
    ELASTIC_LOG(
        kWarning, "node-agent",
        "cannot tell the head we are draining: not connected to the head at " << HeadAddress());
  }
  Terminate();
}

void NodeAgent::StopWorkers() { Terminate(); }

void NodeAgent::BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int NodeAgent::RunUntilSignalled() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  const timespec poll = {0, 100 * 1000 * 1000};
  for (;;) {
    const int signal = sigtimedwait(&set, nullptr, &poll);
    if (signal == SIGTERM || signal == SIGINT) {
      Drain(std::string(signal == SIGTERM ? "SIGTERM" : "SIGINT") + " to node agent " +
            options_.name + " (preemption)");
      return 0;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_.empty()) {
      if (!head_failure_.empty()) {
        ELASTIC_LOG(kError, "node-agent",
                    "node agent " << options_.name << " exits: " << head_failure_);
        return 1;
      }
      for (const auto& exit : exits_) {
        if (exit.exit_code != 0) return 1;
      }
      return 0;
    }
  }
}

}  // namespace elastic::runtime
