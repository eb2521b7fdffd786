// The decisions of an elastic worker (worker.cc, class Worker) that need no
// socket, no communicator, no model and no clock: how long its collectives
// wait, when rank 0 sends the controller a copy of the state, whether a copy
// fits one control frame, what a stop generation at the worker's own commit
// does, what one turn of the wait for a generation decides, and what one turn
// of the reconnect loop does after the head was lost. The worker does the I/O
// and passes the time in; these functions only decide. Each decision comes
// with a reason for the log, and where the worker throws or warns, with the
// exact text. Kept apart from the worker so that they are tested as tables
// (worker_policy_test.cc), without processes and without LibTorch.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/head_reconnect.h"
#include "trainer/elastic/protocol/state_source.h"

namespace elastic::trainer {

using WorkerClock = std::chrono::steady_clock;

// ---- Timeouts derived from --step-timeout (RunGeneration) ----

// How long the collectives of one generation wait.
struct CollectiveTimeouts {
  // Gloo's default for every collective. Below the step timeout (half of it):
  // a rank waiting for a hung peer leaves the collective, and reports the
  // fault, before the hung one's step watchdog fires and ends that process;
  // otherwise the waiting ranks would be taken for the hung ones.
  std::chrono::milliseconds collective{0};
  // Gloo's rendezvous (connecting the pairs). At most the step timeout: a
  // peer that never shows up must not hold the others longer than a step may.
  std::chrono::milliseconds rendezvous{0};
  std::string reason;
};

// collective = min(60 s, step_timeout x 0.5), rendezvous = min(30 s,
// step_timeout), in whole milliseconds (truncated, as worker.cc did).
CollectiveTimeouts TimeoutsFor(double step_timeout_seconds);

// ---- The controller's copy of the state ----

// Whether rank 0's report sends the controller a copy of the state, and why.
struct CopyDecision {
  bool send = false;
  std::string reason;
};

// When a commit carries a copy (CommitPoint). The controller keeps one every
// --state-copy-every commits: with it, losing every worker at once costs at
// most the steps since that commit. A stop commit always carries one: when
// every worker leaves, the copy is what the job goes on from. The count goes
// on across generations (one schedule per worker process); a copy sent with a
// Synced report does not reset it.
class CopySchedule {
 public:
  explicit CopySchedule(int64_t state_copy_every) : every_(state_copy_every) {}

  // A commit of `rank`; `stop` when it is the commit the generation stops at.
  // Only rank 0's commits count; a copy resets the count.
  CopyDecision AtCommit(int rank, bool stop);

  int64_t commits_since_copy() const { return since_copy_; }

 private:
  int64_t every_;
  int64_t since_copy_ = 0;
};

// Whether rank 0's Synced report carries the state it synced (ReportSynced):
// the controller asked for it (the state came from a member and is newer than
// the controller's copy; without it a controller restarted before the next
// copy would train the steps in between again), copies are on, and this
// worker holds a commit to send.
CopyDecision CopyWithSynced(bool send_copy, int64_t state_copy_every, bool holds_commit);

// What a CommitReport or Synced adds to the state it carries, with room to spare.
inline constexpr size_t kCopyFrameOverhead = size_t{64} << 10;

// Whether a sealed copy of `state_size` bytes goes out.
struct FrameFit {
  bool send = false;
  // The warning to log, the first time a copy does not fit; empty otherwise.
  std::string warning;
  std::string reason;
};

// One frame carries the copy, and the head refuses (and disconnects) a frame
// over its limit: rank 0 would be taken for dead. A copy fits when it is at
// most max_frame_bytes - kCopyFrameOverhead; the first one that does not is
// said once (the controller then keeps no copy), later ones silently.
class CopyFrameCheck {
 public:
  explicit CopyFrameCheck(size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  FrameFit Check(size_t state_size);

  // The largest copy that goes out. As in worker.cc, the subtraction is
  // unsigned: a max_frame_bytes below the overhead wraps (every copy fits).
  size_t limit() const { return max_frame_bytes_ - kCopyFrameOverhead; }

 private:
  size_t max_frame_bytes_;
  bool said_too_large_ = false;
};

// ---- A stop generation at the worker's own commit (RunGeneration) ----

enum class OwnCommitStop {
  kNo,            // not such a generation: rendezvous and sync as usual
  kStop,          // a rank other than 0: nothing to write, it stops
  kCheckpoint,    // rank 0 writes the checkpoint from its own commit, then stops
  kNoCheckpoint,  // rank 0 does not hold the order's point: error, stops without one
};

struct OwnCommitDecision {
  OwnCommitStop action = OwnCommitStop::kNo;
  std::string reason;  // kNoCheckpoint: the error line worker.cc logs
};

// A stop generation (`stop` non-empty) whose source is a member at rank 0
// holds the state the job stops at on rank 0: rank 0 writes the checkpoint
// from its own commit and nobody needs a collective (a rendezvous that fails
// under load would lose the checkpoint). `holds` is the commit this worker
// holds (nullopt: none); it must be the order's point exactly.
// `checkpointed` is the point of the last checkpoint this worker wrote: a job
// stopped at an epoch boundary that checkpointed anyway has its checkpoint
// already, and writing it again would report the same checkpoint twice.
OwnCommitDecision StopAtOwnCommit(const std::string& stop, const StateSource& source, int rank,
                                  const std::optional<StatePoint>& holds,
                                  const std::optional<StatePoint>& checkpointed);

// ---- Waiting for a generation (WaitForGeneration) ----

// Set when a generation's rendezvous failed: the time to stop waiting for a
// generation that would retry it, and why it failed.
struct RendezvousGiveUp {
  WorkerClock::time_point at;
  std::string error;
};

// After a failed rendezvous the controller re-forms the generation. If
// nothing new comes within --rendezvous-timeout, the workers cannot reach each
// other, and waiting longer would hang the job. Any order that arrives
// cancels it (WaitDecision::reset_give_up).
RendezvousGiveUp AfterRendezvousFailure(const std::string& error, WorkerClock::time_point now,
                                        double rendezvous_timeout_seconds);

// What one turn of the wait saw, in the order worker.cc looks.
struct WaitInputs {
  // Why the controller said the job is over for this worker (TrainerInbox::Over).
  std::optional<std::string> over;
  // An order for a generation after the last one arrived: its generation and
  // this worker's rank in it (-1: not in it).
  std::optional<uint64_t> order_generation;
  int rank_in_order = -1;
  bool draining = false;         // this worker reported Draining (SIGTERM)
  bool connected = true;         // the head's connection is up
  bool in_view = false;          // in the head's latest membership view
  uint64_t last_generation = 0;  // of the last order seen (after this one's, if any)
  std::optional<RendezvousGiveUp> give_up;
  WorkerClock::time_point now;
};

enum class WaitAction {
  kRun,        // train in the order's generation
  kSkip,       // an order without this worker: not admitted (yet), wait for the next
  kLeave,      // exit cleanly: the job is over, or a draining worker has nothing to finish
  kReconnect,  // the head is lost: Reconnect(), then decide again (connected, new view, now)
  kGiveUp,     // throw FatalError(reason)
  kWait,       // nothing to do: the next turn
};

struct WaitDecision {
  WaitAction action = WaitAction::kWait;
  // An order arrived: forget the rendezvous give-up (whatever the action).
  bool reset_give_up = false;
  std::string reason;  // kGiveUp: the FatalError's text
};

// One turn: the job over -> leave; an order -> run it if this worker is in it,
// else leave if draining, else skip it; the head lost -> reconnect; draining
// and in no view -> leave (nothing to finish); the rendezvous give-up time
// passed (strictly) -> give up; else wait.
WaitDecision DecideWait(const WaitInputs& in);

// ---- Reconnecting to a lost head (Reconnect) ----

// What the worker knows when its head is lost.
struct HeadLost {
  std::string host;
  uint16_t port = 0;
  std::string job_id;                    // this worker's job
  std::optional<StatePoint> holds;       // the commit it holds (nullopt: none)
  std::chrono::milliseconds timeout{0};  // the node agent's head_reconnect_timeout
};

// Time between two attempts: the node agent's (runtime/head_reconnect.h).
inline constexpr std::chrono::milliseconds kReconnectRetryDelay = runtime::kHeadReconnectInterval;

// How the last step of the reconnect loop went.
struct ReconnectAttempt {
  enum class Result {
    kNone,      // nothing tried since the loop started or since the last wait
    kFailed,    // no head, no controller, no job spec, or Join() failed: `error` says why
    kAnswered,  // a controller answered with its job spec, whose job id is `job_id`
  };
  Result result = Result::kNone;
  std::string job_id;
  // The last failure; before any attempt, why the head was lost. Kept through kNone.
  std::string error;
};

enum class ReconnectAction {
  kAttempt,   // time is left: connect, look the controller up, ask for its job spec
  kWait,      // the attempt failed: wait `wait`, then decide again (with kNone)
  kJoin,      // the same job answered: adopt the client and Join() (if it throws: kFailed)
  kOtherJob,  // another job answered: throw FatalError(reason) at once
  kGiveUp,    // the deadline passed: throw FatalError(reason)
};

struct ReconnectDecision {
  ReconnectAction action = ReconnectAction::kAttempt;
  std::chrono::milliseconds wait{0};
  std::string reason;  // kOtherJob and kGiveUp: the FatalError's text
};

// One step of the loop: an answer decides at once (whatever the time); a
// failure waits kReconnectRetryDelay; after that, or before the first
// attempt, another attempt while now < deadline, else give up.
ReconnectDecision DecideReconnect(const HeadLost& lost, const ReconnectAttempt& last,
                                  WorkerClock::time_point now, WorkerClock::time_point deadline);

}  // namespace elastic::trainer
