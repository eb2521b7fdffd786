#include "runtime/node_agent.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "runtime/auth.h"
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

}  // namespace

NodeAgent::NodeAgent(NodeAgentOptions options)
    : options_(std::move(options)), binary_path_(ResolveBinary(options_.binary)) {
  head_ = std::make_unique<HeadClient>(HeadOptionsOf(options_));
  node_id_ = head_->RegisterNode(options_.name, 0);
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
    lock.lock();
    changed_.wait_for(lock, kPollInterval, [this] { return !commands_.empty(); });
  }
}

pid_t NodeAgent::ForkWorker(uint32_t index) {
  // Everything the child needs is built before fork: after fork it may only
  // make async-signal-safe calls.
  std::vector<std::string> args = {binary_path_, "--role=worker"};
  args.insert(args.end(), options_.worker_args.begin(), options_.worker_args.end());
  std::map<std::string, std::string> extra = options_.environment;
  extra["ELASTIC_HEAD_ADDRESS"] = options_.head_host + ":" + std::to_string(options_.head_port);
  extra[kTokenEnvironmentVariable] = options_.token;
  extra["ELASTIC_NODE_ID"] = std::to_string(node_id_);
  extra["ELASTIC_WORKER_INDEX"] = std::to_string(index);
  extra["ELASTIC_HEARTBEAT_MS"] = std::to_string(options_.transport.heartbeat_interval.count());
  extra["ELASTIC_HEARTBEAT_TIMEOUT_MS"] =
      std::to_string(options_.transport.heartbeat_timeout.count());
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
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the agent died before prctl
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // the agent may block SIGTERM
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
    commands_.push_back([this, count, spawned] {
      std::vector<pid_t> pids;
      try {
        for (uint32_t i = 0; i < count; ++i) {
          uint32_t index;
          {
            std::lock_guard<std::mutex> lock(mutex_);
            index = next_index_++;
          }
          const pid_t pid = ForkWorker(index);
          {
            std::lock_guard<std::mutex> lock(mutex_);
            running_.push_back(Worker{index, pid});
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
    try {
      head_->ReportExit(node_id_, exit.worker_index, exit.pid, exit.exit_code, exit.signal);
    } catch (const std::exception& e) {
      ELASTIC_LOG(kWarning, "node-agent", "cannot report exit to head: " << e.what());
    }
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
  try {
    head_->ReportDraining(node_id_, reason);
  } catch (const std::exception& e) {
    ELASTIC_LOG(kWarning, "node-agent", "cannot tell the head we are draining: " << e.what());
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
      for (const auto& exit : exits_) {
        if (exit.exit_code != 0) return 1;
      }
      return 0;
    }
  }
}

}  // namespace elastic::runtime
