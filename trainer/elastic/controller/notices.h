// What the job controller tells the user, as typed notices: one struct per
// kind of thing it says, carrying the values, not the words. The controller
// (job_controller.h) emits them in action::Notify; RenderNotice is the one
// reporter that turns a notice into the line the driver prints; the driver
// also writes the facts among them to the event log (EventOfNotice in
// run_events.h). notices_test.cc holds every line's exact wording.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "trainer/elastic/protocol/state_source.h"
#include "trainer/state_point.h"

namespace elastic::trainer {

// How every source of the job's state was lost.
enum class StateLoss {
  kEveryWorkerLost,     // the last view emptied with no copy and no checkpoint
  kEveryHolderLost,     // the workers left hold no commit, nor does anything else
  kLastSourceFailed,    // rank 0 could not load the last source there was
  kNoneBackAfterStall,  // lost in a stall's aftermath; none came back within the grace
};

namespace notice {
// A node's workers failed `failures` times: it is not admitted for `for_ms`.
struct NodeBlacklisted {
  uint64_t node = 0;
  int64_t for_ms = 0;
  int64_t failures = 0;
};
// Its blacklisting ran out.
struct NodeForgiven {
  uint64_t node = 0;
};
// Without the blacklisted nodes' workers the job would be below --min-workers.
struct AdmittingBlacklisted {
  int64_t min_workers = 0;
};
// The view emptied; the job waits for joiners and continues from `source`.
struct EveryWorkerGone {
  StateSource source;
};
// A generation restores an older commit than the newest, whose holders are gone.
struct RestoresOlder {
  uint64_t generation = 0;
  StateSource source;
  StatePoint newest;
};
// Every worker was lost before the first commit: the seeded model again.
struct StartsFromSeed {
  uint64_t generation = 0;
};
// A worker is draining (preemption notice).
struct WorkerLeaving {
  uint64_t member = 0;
  bool at_commit = true;  // false: at the next epoch boundary
};
// Every worker of the view drains at once, and the controller's copy keeps their last commit.
struct EveryoneLeavingWithCopy {
  StatePoint copy;
};
// The same with no copy (--state-copy-every=0): the job stops with a checkpoint.
struct EveryoneLeavingWithoutCopy {};
// Rank 0 could not load the state it was given.
struct StateUnavailable {
  uint64_t generation = 0;
  std::string reason;  // the worker's words
};
// Error: the checkpoint of --resume could not be read.
struct ResumeUnreadable {};
// Error: faults with no commit in between for `for_ms`.
struct CollectivesKeptFailing {
  int64_t for_ms = 0;
  uint64_t member = 0;  // the last fault's
  std::string reason;
};
// A worker reported a fault: the generation is re-formed.
struct FaultReported {
  uint64_t member = 0;
  uint64_t generation = 0;
  std::string reason;
};
// The first stop signal: stop at the next epoch boundary.
struct StopAtEpochBoundary {
  std::string signal;  // "SIGTERM", "SIGINT"
};
// The second: stop at the next commit.
struct StopAtNextCommit {
  std::string signal;
};
// A stop signal before the first generation.
struct StoppedBeforeTraining {};
// Error: every initial worker exited before registering.
struct WorkersExitedBeforeJoining {
  int64_t workers = 0;  // --workers
};
// Error: too few workers registered within --start-timeout.
struct StartTimedOut {
  int64_t registered = 0;
  int64_t wanted = 0;  // --workers
  int64_t timeout_ms = 0;
};
// Error: after a take-over, too few workers came back.
struct TooFewCameBack {
  int64_t came_back = 0;
  int64_t min_workers = 0;
};
// After a take-over, no holder of the newest commit came back in time.
struct NewestNotBack {
  StatePoint newest;
  int64_t waited_ms = 0;
};
// After a take-over, workers came back.
struct WorkersCameBack {
  int64_t workers = 0;
};
// The view is below --min-workers: the job waits up to --rendezvous-timeout.
struct BelowMinimum {
  int64_t workers = 0;
  int64_t min_workers = 0;
};
// Error: below --min-workers for --rendezvous-timeout.
struct BelowMinimumTooLong {
  int64_t workers = 0;
  int64_t for_ms = 0;
  int64_t min_workers = 0;
};
// Nobody trains and `ready` workers could: the join window opens.
struct JoinWindowOpened {
  int64_t ready = 0;
  int64_t window_ms = 0;
  int64_t largest_world = 0;  // the largest world trained so far
};
// The job stops with nobody left to write a checkpoint, and no copy newer than it.
struct NoWorkerForCheckpoint {
  std::optional<StatePoint> checkpoint;  // the newest in --checkpoint-dir
};
// Error: every source of the state is gone.
struct StateLost {
  StateLoss loss = StateLoss::kEveryWorkerLost;
  std::optional<StatePoint> newest;  // the newest commit there was
  int64_t grace_ms = 0;              // kNoneBackAfterStall: how long the workers were waited for
};
// The controller's own process stalled: no tick for `gap_ms`.
struct StallNoticed {
  int64_t gap_ms = 0;
};
// The state was lost right after a stall: the workers are waited for.
struct WaitingAfterStall {
  StateLoss loss = StateLoss::kEveryWorkerLost;
  int64_t grace_ms = 0;
};
}  // namespace notice

using Notice = std::variant<
    notice::NodeBlacklisted, notice::NodeForgiven, notice::AdmittingBlacklisted,
    notice::EveryWorkerGone, notice::RestoresOlder, notice::StartsFromSeed, notice::WorkerLeaving,
    notice::EveryoneLeavingWithCopy, notice::EveryoneLeavingWithoutCopy, notice::StateUnavailable,
    notice::ResumeUnreadable, notice::CollectivesKeptFailing, notice::FaultReported,
    notice::StopAtEpochBoundary, notice::StopAtNextCommit, notice::StoppedBeforeTraining,
    notice::WorkersExitedBeforeJoining, notice::StartTimedOut, notice::TooFewCameBack,
    notice::NewestNotBack, notice::WorkersCameBack, notice::BelowMinimum,
    notice::BelowMinimumTooLong, notice::JoinWindowOpened, notice::NoWorkerForCheckpoint,
    notice::StateLost, notice::StallNoticed, notice::WaitingAfterStall>;

// The line the driver prints for `notice` (no newline): "driver: ...",
// "driver: warning: ..." or "driver: error: ...".
std::string RenderNotice(const Notice& notice);

// The words of the stops these errors cause (the Finish reason, the end
// event's): the line without its prefix and its "; stopping".
std::string StopReason(const notice::TooFewCameBack& n);
std::string StopReason(const notice::BelowMinimumTooLong& n);

}  // namespace elastic::trainer
