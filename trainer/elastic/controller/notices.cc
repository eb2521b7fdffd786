#include "trainer/elastic/controller/notices.h"

#include "trainer/elastic/controller/overloaded.h"

namespace elastic::trainer {
namespace {

std::string Seconds(int64_t ms) { return std::to_string(ms / 1000) + " s"; }

std::string SecondsTenths(int64_t ms) {
  return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) + " s";
}

// What happened, in the words of the lines that say the state was lost.
std::string WhatHappened(StateLoss loss, int64_t grace_ms) {
  switch (loss) {
    case StateLoss::kEveryWorkerLost:
      return "every worker was lost";
    case StateLoss::kEveryHolderLost:
      return "every holder of the state was lost";
    case StateLoss::kLastSourceFailed:
      return "the last source of the state failed";
    case StateLoss::kNoneBackAfterStall:
      return "every worker was lost while this process stalled, and none came back with its "
             "commit within " +
             Seconds(grace_ms);
  }
  return "the state was lost";
}

// One function a notice: its line.
std::string Line(const notice::NodeBlacklisted& n) {
  return "driver: node " + std::to_string(n.node) + " blacklisted for " + Seconds(n.for_ms) +
         " after " + std::to_string(n.failures) + " worker failures; its workers are not admitted";
}
std::string Line(const notice::NodeForgiven& n) {
  return "driver: node " + std::to_string(n.node) + " is no longer blacklisted";
}
std::string Line(const notice::AdmittingBlacklisted& n) {
  return "driver: admitting workers of blacklisted nodes: without them the job has fewer than "
         "--min-workers=" +
         std::to_string(n.min_workers);
}
std::string Line(const notice::EveryWorkerGone& n) {
  return "driver: every worker is gone; the job waits up to --rendezvous-timeout for a worker to "
         "join and continues from " +
         std::string(ToString(n.source.kind)) + " (" + ToString(n.source.point) + ")";
}
std::string Line(const notice::RestoresOlder& n) {
  return "driver: warning: generation " + std::to_string(n.generation) + " restores " +
         ToString(n.source.point) + " from " + ToString(n.source.kind) + "; the newer commit (" +
         ToString(n.newest) + ") was held only by workers that are gone: " +
         std::to_string(n.newest.step - n.source.point.step) + " steps are trained again";
}
std::string Line(const notice::StartsFromSeed& n) {
  return "driver: warning: generation " + std::to_string(n.generation) +
         " starts again from the seeded model: every worker was lost before the job's first "
         "commit, so the steps since the start are trained again";
}
std::string Line(const notice::WorkerLeaving& n) {
  return "driver: worker " + std::to_string(n.member) +
         " is leaving (preemption notice); it leaves " +
         (n.at_commit ? "at the next commit" : "at the next epoch boundary");
}
std::string Line(const notice::EveryoneLeavingWithCopy& n) {
  return "driver: every worker is leaving; the controller's copy keeps their last commit (" +
         ToString(n.copy) + ")";
}
std::string Line(const notice::EveryoneLeavingWithoutCopy&) {
  return "driver: every worker is leaving and the controller keeps no copy of their last commit "
         "(--state-copy-every=0); stopping with a checkpoint";
}
std::string Line(const notice::StateUnavailable& n) {
  return "driver: rank 0 of generation " + std::to_string(n.generation) +
         " could not load its state: " + n.reason;
}
std::string Line(const notice::ResumeUnreadable&) {
  return "driver: error: --resume cannot continue without its checkpoint; stopping";
}
std::string Line(const notice::CollectivesKeptFailing& n) {
  return "driver: error: the workers' collectives kept failing for " + Seconds(n.for_ms) +
         " without a commit (last: worker " + std::to_string(n.member) + ": " + n.reason +
         "); stopping. Can the workers' machines reach each other? (docs/operations.md)";
}
std::string Line(const notice::FaultReported& n) {
  return "driver: worker " + std::to_string(n.member) + " reported a fault in generation " +
         std::to_string(n.generation) + " (" + n.reason + "); re-forming the generation";
}
std::string Line(const notice::StopAtEpochBoundary& n) {
  return "driver: " + n.signal +
         ": stopping the job at the next epoch boundary with a checkpoint (again: at the next "
         "commit; a third time: at once, losing the work since the last commit)";
}
std::string Line(const notice::StopAtNextCommit& n) {
  return "driver: " + n.signal + " again: stopping at the next commit (--commit-every)";
}
std::string Line(const notice::StoppedBeforeTraining&) {
  return "driver: stopped before training started; nothing to checkpoint";
}
std::string Line(const notice::WorkersExitedBeforeJoining& n) {
  return "driver: error: all " + std::to_string(n.workers) +
         " workers exited before joining the job; their errors are above";
}
std::string Line(const notice::StartTimedOut& n) {
  return "driver: error: only " + std::to_string(n.registered) + " of " + std::to_string(n.wanted) +
         " workers registered within " + Seconds(n.timeout_ms);
}
std::string Line(const notice::TooFewCameBack& n) {
  return "driver: error: " + StopReason(n) + "; stopping";
}
std::string Line(const notice::NewestNotBack& n) {
  return "driver: no worker holding the newest commit (" + ToString(n.newest) +
         ") came back within " + Seconds(n.waited_ms) + "; going on from the newest source left";
}
std::string Line(const notice::WorkersCameBack& n) {
  return "driver: " + std::to_string(n.workers) +
         " workers came back after the controller restarted";
}
std::string Line(const notice::BelowMinimum& n) {
  return "driver: " + std::to_string(n.workers) +
         " workers, below --min-workers=" + std::to_string(n.min_workers) +
         "; waiting up to --rendezvous-timeout for joins";
}
std::string Line(const notice::BelowMinimumTooLong& n) {
  return "driver: error: " + StopReason(n) + "; stopping";
}
std::string Line(const notice::JoinWindowOpened& n) {
  return "driver: " + std::to_string(n.ready) + " workers can train again; waiting for more that " +
         "join together until none came for " + SecondsTenths(n.window_ms) +
         " (--join-window; the job trained with up to " + std::to_string(n.largest_world) + ")";
}
std::string Line(const notice::NoWorkerForCheckpoint& n) {
  return "driver: no worker is left to write a checkpoint from the last commit; " +
         std::string(n.checkpoint ? "the newest checkpoint (" + ToString(*n.checkpoint) +
                                        ") is in --checkpoint-dir"
                                  : "there is no checkpoint");
}
std::string Line(const notice::StateLost& n) {
  std::string text = "driver: error: " + WhatHappened(n.loss, n.grace_ms);
  if (n.newest) text += " at " + ToString(*n.newest);
  return text +
         ", and no other copy of the job's state exists: no worker holds a commit, the controller "
         "keeps no copy (--state-copy-every=0 or none sent yet) and no checkpoint was written. The "
         "job's progress is lost; nothing was overwritten. Start it again (with --resume if "
         "--checkpoint-dir holds an older checkpoint of this job).";
}
std::string Line(const notice::StallNoticed& n) {
  return "driver: this process stalled: no tick for " + SecondsTenths(n.gap_ms) +
         " (stopped or starved of CPU); workers lost now may only have lost the head meanwhile";
}
std::string Line(const notice::WaitingAfterStall& n) {
  return "driver: " + WhatHappened(n.loss, n.grace_ms) +
         " right after this process stalled; waiting up to " + Seconds(n.grace_ms) +
         " (--reconnect-timeout) for the workers to reconnect with their commits (they saw the "
         "head "
         "silent, and may only have lost it)";
}

}  // namespace

std::string StopReason(const notice::TooFewCameBack& n) {
  return "only " + std::to_string(n.came_back) +
         " workers came back after the controller restarted, below --min-workers=" +
         std::to_string(n.min_workers);
}

std::string StopReason(const notice::BelowMinimumTooLong& n) {
  return "only " + std::to_string(n.workers) + " workers for " + Seconds(n.for_ms) +
         " (--rendezvous-timeout), below --min-workers=" + std::to_string(n.min_workers);
}

std::string RenderNotice(const Notice& notice) {
  // One line a notice kind and no generic case: a notice added to Notice
  // without its line here does not compile.
  return std::visit(Overloaded{
                        [](const notice::NodeBlacklisted& n) { return Line(n); },
                        [](const notice::NodeForgiven& n) { return Line(n); },
                        [](const notice::AdmittingBlacklisted& n) { return Line(n); },
                        [](const notice::EveryWorkerGone& n) { return Line(n); },
                        [](const notice::RestoresOlder& n) { return Line(n); },
                        [](const notice::StartsFromSeed& n) { return Line(n); },
                        [](const notice::WorkerLeaving& n) { return Line(n); },
                        [](const notice::EveryoneLeavingWithCopy& n) { return Line(n); },
                        [](const notice::EveryoneLeavingWithoutCopy& n) { return Line(n); },
                        [](const notice::StateUnavailable& n) { return Line(n); },
                        [](const notice::ResumeUnreadable& n) { return Line(n); },
                        [](const notice::CollectivesKeptFailing& n) { return Line(n); },
                        [](const notice::FaultReported& n) { return Line(n); },
                        [](const notice::StopAtEpochBoundary& n) { return Line(n); },
                        [](const notice::StopAtNextCommit& n) { return Line(n); },
                        [](const notice::StoppedBeforeTraining& n) { return Line(n); },
                        [](const notice::WorkersExitedBeforeJoining& n) { return Line(n); },
                        [](const notice::StartTimedOut& n) { return Line(n); },
                        [](const notice::TooFewCameBack& n) { return Line(n); },
                        [](const notice::NewestNotBack& n) { return Line(n); },
                        [](const notice::WorkersCameBack& n) { return Line(n); },
                        [](const notice::BelowMinimum& n) { return Line(n); },
                        [](const notice::BelowMinimumTooLong& n) { return Line(n); },
                        [](const notice::JoinWindowOpened& n) { return Line(n); },
                        [](const notice::NoWorkerForCheckpoint& n) { return Line(n); },
                        [](const notice::StateLost& n) { return Line(n); },
                        [](const notice::StallNoticed& n) { return Line(n); },
                        [](const notice::WaitingAfterStall& n) { return Line(n); },
                    },
                    notice);
}

}  // namespace elastic::trainer
