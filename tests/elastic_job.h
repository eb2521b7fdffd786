// Driving a real elastic job of //trainer:cifar in an end-to-end test: the
// small job every scenario runs (resnet8 on 3,072 Fashion-MNIST images), and
// what a test reads off its processes' logs or does to them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/job_events.h"
#include "tests/process.h"

namespace elastic::tests {

inline constexpr int64_t kTrainSamples = 3072;
inline constexpr char kBinary[] = "examples/cifar/cifar";

// The flags of a job of `workers` local workers and `epochs` epochs with its
// samples logged in dir/samples, its checkpoint in dir/checkpoint and its
// event log in RunDir(dir).
std::vector<std::string> JobArgs(const std::string& dir, int workers, int epochs);

// A node of `workers` workers joining the head at 127.0.0.1:`port` with the
// token in `token_file`, its output in `log`.
std::unique_ptr<Process> JoinNode(const std::string& port, int workers,
                                  const std::string& token_file, const std::string& log);

// Where JobArgs(dir, ...) has the job write its events.jsonl: dir/run.
std::string RunDir(const std::string& dir);

// pid of the worker that had `rank` in `generation` (its "params" event in
// the log in `run_dir`), waiting up to 120 s for it; -1 if it never came.
pid_t WorkerPid(const std::string& run_dir, int generation, int rank);

// A port P for a head that is restarted with --port=P, such that P and P+1
// (its controller's) are free now and below the kernel's ephemeral range:
// with --port=0 the controller took any free port, but a restarted one needs
// P+1, which any outgoing connection on the machine may hold by then.
std::string RestartablePort();

// The port the driver's head listens on, once it says so ("" if it never does).
std::string HeadPort(Process& driver);

// Waits until the job is at least `step` steps into (1-based) epoch `epoch`.
bool WaitForStep(Process& driver, int epoch, int step);

// Every sample of each of the first `epochs` epochs was trained on exactly
// once (--log-samples=dir/samples).
void CheckSamples(const std::string& dir, int epochs);

// The last (1-based) epoch the log has a summary of; 0 if none.
int LastEpoch(const JobEvents& events);

// The step of the state the first generation after `generation` restored
// (its rank 0's "params" event), or -1.
int64_t StepRestoredAfter(const JobEvents& events, int generation);

// Resets every established TCP connection of process `pid` (its own end, found
// through /proc) with `ss -K`, as a NAT timeout or a middlebox would: the
// process lives on. With `remote_port`, only its connections to that port.
// Returns how many connections were reset, -1 if ss failed.
int ResetConnectionsOf(pid_t pid, int remote_port = 0);

// The pids of the workers a node agent's log says it started.
std::vector<pid_t> WorkersStartedBy(const std::string& agent_output);

}  // namespace elastic::tests
