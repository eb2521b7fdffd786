// The node agent (like Ray's raylet): starts the worker processes of one
// machine, watches them, and speaks for them to the head.
//
// - Workers are `<binary> --role=worker <worker_args...>`; they find the head
//   and the token in their environment (WorkerEnvironment::FromEnvironment),
//   never on the command line.
// - Every exit is reported to the head (subscribers see an "exited" update).
// - Drain() (what SIGTERM to a standalone agent triggers) tells the head the
//   node is draining, then stops the workers: SIGTERM, a grace period, SIGKILL.
// - No orphans: each worker leads its own process group (the agent signals
//   the whole group, so a worker's own children go too) and has
//   PR_SET_PDEATHSIG=SIGKILL, so it dies even when the agent is SIGKILLed.
//   Workers are forked from the agent's supervisor thread, which lives as long
//   as the agent (PDEATHSIG follows the forking thread, not the process).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/head_client.h"
#include "runtime/options.h"

namespace elastic::runtime {

struct NodeAgentOptions {
  std::string head_host = "127.0.0.1";
  uint16_t head_port = 0;
  std::string token;
  std::string name = "node";
  // The worker binary; /proc/self/exe means "this program" (resolved at start).
  std::string binary = "/proc/self/exe";
  std::vector<std::string> worker_args;            // after --role=worker
  std::map<std::string, std::string> environment;  // extra variables for workers
  std::chrono::milliseconds grace{10000};          // SIGTERM -> SIGKILL
  TransportOptions transport;
};

struct WorkerExit {
  uint32_t worker_index = 0;
  pid_t pid = 0;
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
};

class NodeAgent {
 public:
  // Connects to the head and registers the node. Spawns nothing yet.
  explicit NodeAgent(NodeAgentOptions options);
  // Stops the workers (SIGTERM, grace, SIGKILL) and waits for them.
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  uint64_t node_id() const { return node_id_; }

  // Starts count more workers (indices continue from earlier ones); returns their pids.
  std::vector<pid_t> SpawnWorkers(uint32_t count);
  // Pids of workers still running.
  std::vector<pid_t> running_workers();
  // Exits seen so far, in order.
  std::vector<WorkerExit> exits();
  // Blocks until no worker runs or timeout passes; true when none runs.
  bool WaitForWorkers(std::chrono::milliseconds timeout);

  // Preemption: tells the head this node is draining (reason), then stops
  // the workers. Safe to call more than once.
  void Drain(const std::string& reason);
  // Stops the workers without a draining notice.
  void StopWorkers();

  // For a process that is only a node agent: blocks SIGTERM and SIGINT, and
  // returns when every worker has exited (0 when all exited with 0) or, on
  // SIGTERM/SIGINT, after draining (exit code 0). Call before starting any
  // other thread, so that no thread gets the signal instead.
  static void BlockTerminationSignals();
  int RunUntilSignalled();

 private:
  struct Worker {
    uint32_t index;
    pid_t pid;
  };

  void SupervisorLoop();
  pid_t ForkWorker(uint32_t index);  // supervisor thread only
  void ReapExited();                 // supervisor thread only
  void Terminate();

  NodeAgentOptions options_;
  std::string binary_path_;
  std::unique_ptr<HeadClient> head_;
  uint64_t node_id_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> commands_;  // run on the supervisor thread
  std::vector<Worker> running_;
  std::vector<WorkerExit> exits_;
  uint32_t next_index_ = 0;
  bool stopping_ = false;
  bool drained_ = false;
  std::thread supervisor_;
};

}  // namespace elastic::runtime
