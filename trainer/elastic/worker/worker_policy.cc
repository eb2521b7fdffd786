#include "trainer/elastic/worker/worker_policy.h"

#include <algorithm>
#include <cstdio>

namespace elastic::trainer {
namespace {

std::string Seconds(double seconds) {
  char text[64];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

std::string Ms(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

std::string Holding(const std::optional<StatePoint>& holds) {
  return holds ? "the commit at " + ToString(*holds) : "no commit";
}

}  // namespace

CollectiveTimeouts TimeoutsFor(double step_timeout_seconds) {
  constexpr std::chrono::milliseconds kCollectiveCap = std::chrono::seconds(60);
  constexpr std::chrono::milliseconds kRendezvousCap = std::chrono::seconds(30);
  const std::chrono::milliseconds half(static_cast<int64_t>(step_timeout_seconds * 500));
  const std::chrono::milliseconds whole(static_cast<int64_t>(step_timeout_seconds * 1000));
  CollectiveTimeouts t;
  t.collective = std::min(kCollectiveCap, half);
  t.rendezvous = std::min(kRendezvousCap, whole);
  t.reason = "collectives wait " + Ms(t.collective) +
             (t.collective == kCollectiveCap ? " (the 60 s cap)" : " (half of --step-timeout)") +
             ", the rendezvous " + Ms(t.rendezvous) +
             (t.rendezvous == kRendezvousCap ? " (the 30 s cap)" : " (--step-timeout)") +
             ": below --step-timeout=" + Seconds(step_timeout_seconds) +
             " s, so a rank waiting for a hung peer leaves first";
  return t;
}

CopyDecision CopySchedule::AtCommit(int rank, bool stop) {
  if (rank != 0) return {false, "rank " + std::to_string(rank) + " sends no copy"};
  if (every_ <= 0) return {false, "--state-copy-every=0: the controller keeps no copy"};
  // Counted before the stop is looked at: a stop commit counts like any other.
  ++since_copy_;
  const bool due = since_copy_ >= every_;
  if (!due && !stop) {
    return {false, std::to_string(since_copy_) + " of --state-copy-every=" +
                       std::to_string(every_) + " commits since the last copy"};
  }
  const std::string why = due ? std::to_string(since_copy_) + " commits since the last copy" +
                                    " (--state-copy-every=" + std::to_string(every_) + ")"
                              : "a stop commit always carries a copy";
  since_copy_ = 0;
  return {true, why};
}

CopyDecision CopyWithSynced(bool send_copy, int64_t state_copy_every, bool holds_commit) {
  if (!send_copy) return {false, "the controller's copy is not older than the synced state"};
  if (state_copy_every <= 0) return {false, "--state-copy-every=0: the controller keeps no copy"};
  if (!holds_commit) return {false, "this worker holds no commit to send"};
  return {true, "the synced state came from a member and is newer than the controller's copy"};
}

FrameFit CopyFrameCheck::Check(size_t state_size) {
  const size_t max = limit();
  if (state_size <= max) {
    return {
        true, "",
        std::to_string(state_size) + " bytes fit one frame (at most " + std::to_string(max) + ")"};
  }
  FrameFit fit;
  fit.reason = std::to_string(state_size) + " bytes are over the " + std::to_string(max) +
               " one frame can take: no copy";
  if (!said_too_large_) {
    said_too_large_ = true;
    fit.warning = "warning: the job's state is " + std::to_string(state_size) +
                  " bytes, over the " + std::to_string(max) +
                  " one control-plane frame can take: the controller keeps no copy, so losing "
                  "every worker at once falls back to the newest checkpoint (--checkpoint-dir)";
  }
  return fit;
}

OwnCommitDecision StopAtOwnCommit(const std::string& stop, const StateSource& source, int rank,
                                  const std::optional<StatePoint>& holds,
                                  const std::optional<StatePoint>& checkpointed) {
  if (stop.empty()) return {OwnCommitStop::kNo, "not a stop generation"};
  if (source.kind != SourceKind::kMember || source.rank != 0) {
    return {OwnCommitStop::kNo, std::string("a stop generation from ") + ToString(source.kind) +
                                    " at rank " + std::to_string(source.rank) +
                                    ": the ranks sync first"};
  }
  if (rank != 0) {
    return {OwnCommitStop::kStop,
            "rank " + std::to_string(rank) + ": rank 0 writes the checkpoint from its own commit"};
  }
  if (!holds || !(*holds == source.point)) {
    return {OwnCommitStop::kNoCheckpoint,
            "error: the job stops at " + ToString(source.point) + ", but this worker holds " +
                (holds ? ToString(*holds) : std::string("no commit")) + ": no checkpoint written"};
  }
  if (checkpointed && *checkpointed == source.point) {
    return {OwnCommitStop::kStop, "the job stops at " + ToString(source.point) +
                                      ", whose checkpoint this worker wrote already"};
  }
  return {OwnCommitStop::kCheckpoint,
          "the job stops at " + ToString(source.point) + ", the commit this worker holds"};
}

RendezvousGiveUp AfterRendezvousFailure(const std::string& error, WorkerClock::time_point now,
                                        double rendezvous_timeout_seconds) {
  return {now + std::chrono::milliseconds(static_cast<int64_t>(rendezvous_timeout_seconds * 1000)),
          error};
}

WaitDecision DecideWait(const WaitInputs& in) {
  if (in.over) return {WaitAction::kLeave, false, "the job is over: " + *in.over};
  if (in.order_generation) {
    const std::string generation = "generation " + std::to_string(*in.order_generation);
    if (in.rank_in_order >= 0) {
      return {WaitAction::kRun, true,
              generation + ": this worker is rank " + std::to_string(in.rank_in_order)};
    }
    if (in.draining) {
      return {WaitAction::kLeave, true, generation + " goes on without this draining worker"};
    }
    return {WaitAction::kSkip, true,
            generation + " does not include this worker (not admitted yet)"};
  }
  // Without its head this worker can neither be told nor rendezvous.
  if (!in.connected) return {WaitAction::kReconnect, false, "the head's connection is lost"};
  // A draining worker that is in no view has nothing to finish.
  if (in.draining && !in.in_view) {
    return {WaitAction::kLeave, false, "draining and in no membership view: nothing to finish"};
  }
  if (in.give_up && in.now > in.give_up->at) {
    return {WaitAction::kGiveUp, false,
            "could not connect to the other workers of generation " +
                std::to_string(in.last_generation) + " (" + in.give_up->error +
                ") and no membership change followed within --rendezvous-timeout: can the "
                "workers' machines reach each other? (docs/operations.md, Addresses)"};
  }
  return {WaitAction::kWait, false, "no order yet"};
}

ReconnectDecision DecideReconnect(const HeadLost& lost, const ReconnectAttempt& last,
                                  WorkerClock::time_point now, WorkerClock::time_point deadline) {
  using Result = ReconnectAttempt::Result;
  const std::string head = lost.host + ":" + std::to_string(lost.port);
  switch (last.result) {
    case Result::kAnswered:
      if (last.job_id == lost.job_id) {
        return {ReconnectAction::kJoin, std::chrono::milliseconds(0),
                "the head at " + head + " answers for job " + lost.job_id + "; holding " +
                    Holding(lost.holds)};
      }
      return {ReconnectAction::kOtherJob, std::chrono::milliseconds(0),
              "the head at " + head + " came back with another job (" + last.job_id +
                  ", this worker's is " + lost.job_id +
                  "): its driver was restarted without this job's --state-dir. This worker's " +
                  (lost.holds ? "commit at " + ToString(*lost.holds) : std::string("state")) +
                  " is not carried into another job; it exits"};
    case Result::kFailed:
      return {ReconnectAction::kWait, kReconnectRetryDelay,
              "attempt failed (" + last.error + "); retrying in " + Ms(kReconnectRetryDelay)};
    case Result::kNone:
      break;
  }
  if (now < deadline) {
    return {ReconnectAction::kAttempt, std::chrono::milliseconds(0),
            "reconnecting to the head at " + head + ", " +
                Ms(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now)) +
                " left"};
  }
  return {ReconnectAction::kGiveUp, std::chrono::milliseconds(0),
          "lost the connection to the head and it did not come back within " +
              std::to_string(lost.timeout.count()) +
              " ms (the node agent's head_reconnect_timeout); last attempt: " + last.error};
}

}  // namespace elastic::trainer
