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
// - Workers inherit no descriptor of the agent's process (every descriptor
//   above stdio is closed before exec): a worker must not keep the head's
//   port or any connection of a process that hosts the agent open.
// - Losing the head is not fatal at once: the agent keeps its workers running
//   and reconnects (same address and token) for up to head_reconnect_timeout,
//   then registers the node again with the new head (under a new node id) and
//   goes on. When no head answers within that time, it stops its workers and
//   RunUntilSignalled fails.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/head_client.h"
#include "runtime/options.h"
#include "runtime/preforked_workers.h"

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
  // Workers forked from this process before it started a thread (they skip
  // loading the binary again); SpawnWorkers takes these first and fork+execs
  // once none is left. Not owned; must outlive the agent.
  PreforkedWorkers* preforked = nullptr;
  TransportOptions transport;
  // After the connection to the head is lost, how long the agent keeps
  // trying to reconnect (every 250 ms) before it stops its workers and
  // RunUntilSignalled fails. A job controller restarted within this time
  // (same address and token) finds the agent and its workers again.
  std::chrono::milliseconds head_reconnect_timeout{60000};
};

struct WorkerExit {
  uint32_t worker_index = 0;
  pid_t pid = 0;
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
};

class NodeAgent {
 public:
  // Connects to the head and registers the node. Spawns nothing yet. Throws
  // std::runtime_error when the head cannot be reached now.
  explicit NodeAgent(NodeAgentOptions options);
  // Stops the workers (SIGTERM, grace, SIGKILL) and waits for them.
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // The node id from the head this agent is registered with now (it changes
  // when the agent registers again with a restarted head).
  uint64_t node_id() const { return node_id_.load(); }
  // False from the moment the connection to the head is lost until the agent
  // has registered with a head again.
  bool head_connected();
  // Why the agent gave up on its head (names the head's address and
  // head_reconnect_timeout); empty while it has not.
  std::string head_failure();

  // Starts count more workers (indices continue from earlier ones); returns
  // their pids. Throws std::logic_error once the agent is stopping, drained or
  // has given up on its head.
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
  // returns when every worker has exited (0 when all exited with 0; 1 when
  // one failed or the agent gave up on its head and stopped them) or, on
  // SIGTERM/SIGINT, after draining (exit code 0). Call before starting any
  // other thread, so that no thread gets the signal instead.
  static void BlockTerminationSignals();
  int RunUntilSignalled();

 private:
  using Clock = std::chrono::steady_clock;

  struct Worker {
    uint32_t index;
    pid_t pid;
    uint64_t node_id;  // the ELASTIC_NODE_ID it was started with
  };
  struct UnreportedExit {
    WorkerExit exit;
    uint64_t node_id;
  };

  void SupervisorLoop();
  pid_t ForkWorker(uint32_t index, uint64_t node_id);  // supervisor thread only
  void ReapExited();                                   // supervisor thread only
  void Terminate();

  // Connects a new client to the head, registers the node and makes them
  // current. Throws when the head cannot be reached or refuses.
  void ConnectToHead(std::chrono::milliseconds connect_timeout);
  // The disconnect callback of client number epoch (runs on its loop thread,
  // so it only records the loss for the supervisor).
  void OnHeadLost(uint64_t epoch, const std::string& reason);
  // Supervisor thread: notices a lost head, reconnects, or gives up.
  void WatchHead();
  void GiveUpOnHead(const std::string& last_error);  // supervisor thread only
  // Reports an exit to the current head, or keeps it for the next head.
  void ReportExit(const UnreportedExit& exit);  // supervisor thread only
  std::shared_ptr<HeadClient> CurrentHead();
  std::string HeadAddress() const;

  NodeAgentOptions options_;
  std::string binary_path_;
  std::atomic<uint64_t> node_id_{0};

  std::mutex mutex_;
  std::condition_variable changed_;
  // The connection to the head; null while the agent reconnects. Threads copy
  // the pointer under mutex_ and call without it (a call may wait for the
  // head), so a replaced client lives until its last caller is done.
  std::shared_ptr<HeadClient> head_;
  uint64_t head_epoch_ = 0;                        // counts clients, for OnHeadLost
  std::optional<Clock::time_point> head_lost_at_;  // set until a head is back
  std::string head_lost_reason_;
  std::string head_failure_;                    // set once the agent gave up
  std::deque<std::function<void()>> commands_;  // run on the supervisor thread
  std::vector<Worker> running_;
  std::vector<WorkerExit> exits_;
  uint32_t next_index_ = 0;
  bool stopping_ = false;
  bool drained_ = false;

  // Supervisor thread only.
  std::vector<UnreportedExit> unreported_;  // exits no head has heard of yet
  Clock::time_point next_reconnect_{};      // when to try again
  std::string last_reconnect_error_;
  std::optional<Clock::time_point> kill_at_;  // after giving up: SIGKILL what is left
  std::thread supervisor_;
};

}  // namespace elastic::runtime
