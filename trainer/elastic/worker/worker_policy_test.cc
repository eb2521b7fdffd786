// The worker's decisions as tables: one row per case, one loop, the row in
// the trace. The texts the worker throws or logs are compared whole, because
// operators (and docs/operations.md) search for them.
#include "trainer/elastic/worker/worker_policy.h"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace elastic::trainer {
namespace {

using std::chrono::milliseconds;

StatePoint At(int64_t epoch, int64_t position, int64_t step) { return {epoch, position, step}; }

// A fixed origin for the clock: the policy only compares and adds.
WorkerClock::time_point T(int64_t ms) { return WorkerClock::time_point() + milliseconds(ms); }

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(WorkerPolicyTest, TimeoutsFollowTheStepTimeout) {
  struct Case {
    double step_timeout;
    int64_t collective_ms, rendezvous_ms;
    const char* collective_why;
    const char* rendezvous_why;
  };
  const Case cases[] = {
      {300, 60000, 30000, "(the 60 s cap)", "(the 30 s cap)"},  // the default: both capped
      {120, 60000, 30000, "(the 60 s cap)", "(the 30 s cap)"},  // exactly at the collective cap
      {100, 50000, 30000, "(half of --step-timeout)", "(the 30 s cap)"},
      {60, 30000, 30000, "(half of --step-timeout)", "(the 30 s cap)"},
      {30, 15000, 30000, "(half of --step-timeout)", "(the 30 s cap)"},  // rendezvous at its cap
      {20, 10000, 20000, "(half of --step-timeout)", "(--step-timeout)"},
      {0.5, 250, 500, "(half of --step-timeout)", "(--step-timeout)"},
      {0.0015, 0, 1, "(half of --step-timeout)", "(--step-timeout)"},  // truncated to whole ms
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "step_timeout=" << c.step_timeout);
    const CollectiveTimeouts t = TimeoutsFor(c.step_timeout);
    EXPECT_EQ(t.collective, milliseconds(c.collective_ms));
    EXPECT_EQ(t.rendezvous, milliseconds(c.rendezvous_ms));
    EXPECT_TRUE(Contains(t.reason, "collectives wait " + std::to_string(c.collective_ms) + " ms " +
                                       c.collective_why))
        << t.reason;
    EXPECT_TRUE(Contains(
        t.reason, "the rendezvous " + std::to_string(c.rendezvous_ms) + " ms " + c.rendezvous_why))
        << t.reason;
    // A waiting rank always leaves a collective before a hung peer's watchdog fires.
    EXPECT_LT(t.collective.count(), c.step_timeout * 1000);
  }
}

TEST(WorkerPolicyTest, CopySchedule) {
  struct Commit {
    int rank;
    bool stop;
    bool send;
    int64_t since_after;  // the count after the commit
  };
  struct Case {
    const char* name;
    int64_t every;
    std::vector<Commit> commits;
  };
  const Case cases[] = {
      {"every 1: each of rank 0's commits",
       1,
       {{0, false, true, 0}, {0, false, true, 0}, {0, true, true, 0}}},
      {"every 3, a stop in between resets the count",
       3,
       {{0, false, false, 1},
        {0, true, true, 0},  // the stop always carries one
        {0, false, false, 1},
        {0, false, false, 2},
        {0, false, true, 0},  // the third since the stop's copy
        {0, false, false, 1}}},
      {"every 3, a stop that is also due",
       3,
       {{0, false, false, 1}, {0, false, false, 2}, {0, true, true, 0}, {0, false, false, 1}}},
      {"ranks other than 0 neither send nor count",
       3,
       {{0, false, false, 1},
        {1, false, false, 1},
        {2, true, false, 1},  // a stop reported by rank 2: still no copy
        {0, false, false, 2},
        {0, false, true, 0}}},
      {"--state-copy-every=0: never, not even at a stop",
       0,
       {{0, false, false, 0}, {0, true, false, 0}, {0, false, false, 0}}},
      {"a negative --state-copy-every is off too", -1, {{0, true, false, 0}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CopySchedule schedule(c.every);
    for (size_t i = 0; i < c.commits.size(); ++i) {
      const Commit& commit = c.commits[i];
      SCOPED_TRACE(testing::Message()
                   << "commit " << i << " rank=" << commit.rank << " stop=" << commit.stop);
      const CopyDecision d = schedule.AtCommit(commit.rank, commit.stop);
      EXPECT_EQ(d.send, commit.send) << d.reason;
      EXPECT_FALSE(d.reason.empty());
      EXPECT_EQ(schedule.commits_since_copy(), commit.since_after);
    }
  }
}

TEST(WorkerPolicyTest, CopyScheduleReasons) {
  CopySchedule schedule(2);
  EXPECT_EQ(schedule.AtCommit(1, false).reason, "rank 1 sends no copy");
  EXPECT_EQ(schedule.AtCommit(0, false).reason,
            "1 of --state-copy-every=2 commits since the last copy");
  EXPECT_EQ(schedule.AtCommit(0, false).reason,
            "2 commits since the last copy (--state-copy-every=2)");
  EXPECT_EQ(schedule.AtCommit(0, true).reason, "a stop commit always carries a copy");
  EXPECT_EQ(CopySchedule(0).AtCommit(0, true).reason,
            "--state-copy-every=0: the controller keeps no copy");
}

TEST(WorkerPolicyTest, CopyWithSynced) {
  struct Case {
    bool send_copy;
    int64_t every;
    bool holds_commit;
    bool send;
    const char* why;
  };
  const Case cases[] = {
      {true, 5, true, true, "newer than the controller's copy"},
      {true, 1, true, true, "newer than the controller's copy"},
      {false, 5, true, false, "not older"},
      {true, 0, true, false, "--state-copy-every=0"},
      {true, 5, false, false, "holds no commit"},
      {false, 0, false, false, "not older"},
      {true, 0, false, false, "--state-copy-every=0"},
      {false, 5, false, false, "not older"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "send_copy=" << c.send_copy << " every=" << c.every
                                    << " holds_commit=" << c.holds_commit);
    const CopyDecision d = CopyWithSynced(c.send_copy, c.every, c.holds_commit);
    EXPECT_EQ(d.send, c.send);
    EXPECT_TRUE(Contains(d.reason, c.why)) << d.reason;
  }
}

TEST(WorkerPolicyTest, CopyFrameCheck) {
  constexpr size_t kMiB = size_t{1} << 20;
  const size_t limit = kMiB - kCopyFrameOverhead;  // 983040
  const std::string warning_at_limit_plus_1 =
      "warning: the job's state is 983041 bytes, over the 983040 one control-plane frame can "
      "take: the controller keeps no copy, so losing every worker at once falls back to the "
      "newest checkpoint (--checkpoint-dir)";
  struct Copy {
    size_t size;
    bool send;
    std::string warning;
  };
  struct Case {
    const char* name;
    size_t max_frame_bytes;
    std::vector<Copy> copies;
  };
  const Case cases[] = {
      {"exactly at the limit fits, one byte over does not",
       kMiB,
       {{limit, true, ""}, {limit + 1, false, warning_at_limit_plus_1}}},
      {"the refusal is said once, later ones silently",
       kMiB,
       {{limit + 1, false, warning_at_limit_plus_1},
        {limit + 1, false, ""},
        {10 * kMiB, false, ""},
        {100, true, ""},  // a copy that fits again goes out
        {limit + 1, false, ""}}},
      {"small copies under the default 256 MiB frame",
       size_t{256} << 20,
       {{0, true, ""}, {(size_t{256} << 20) - kCopyFrameOverhead, true, ""}}},
      {"exactly the overhead: only an empty copy fits",
       kCopyFrameOverhead,
       {{0, true, ""}, {1, false, "warning: the job's state is 1 bytes, over the 0"}}},
      // As in worker.cc, the limit is unsigned: a frame below the overhead wraps.
      {"a frame smaller than the overhead wraps", kCopyFrameOverhead - 1, {{kMiB, true, ""}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CopyFrameCheck check(c.max_frame_bytes);
    for (size_t i = 0; i < c.copies.size(); ++i) {
      const Copy& copy = c.copies[i];
      SCOPED_TRACE(testing::Message() << "copy " << i << " size=" << copy.size);
      const FrameFit fit = check.Check(copy.size);
      EXPECT_EQ(fit.send, copy.send) << fit.reason;
      if (copy.warning.empty()) {
        EXPECT_EQ(fit.warning, "");
      } else {
        EXPECT_EQ(fit.warning.rfind(copy.warning, 0), 0u) << fit.warning;  // a prefix
      }
      EXPECT_FALSE(fit.reason.empty());
    }
  }
}

TEST(WorkerPolicyTest, StopAtOwnCommit) {
  const StatePoint point = At(2, 128, 40);
  const StateSource member0{SourceKind::kMember, 0, point};
  struct Case {
    const char* name;
    std::string stop;
    StateSource source;
    int rank;
    std::optional<StatePoint> holds;
    OwnCommitStop action;
    std::string reason;  // whole, or a part when `whole` is false
    bool whole;
  };
  const Case cases[] = {
      {"no stop: train", "", member0, 0, point, OwnCommitStop::kNo, "not a stop generation", true},
      {"stop from a member at rank 1: sync first",
       "stopped",
       {SourceKind::kMember, 1, point},
       0,
       point,
       OwnCommitStop::kNo,
       "the ranks sync first",
       false},
      {"stop from the controller's copy: sync first",
       "stopped",
       {SourceKind::kControllerCopy, 0, point},
       0,
       std::nullopt,
       OwnCommitStop::kNo,
       "the ranks sync first",
       false},
      {"stop from the checkpoint: sync first",
       "stopped",
       {SourceKind::kCheckpoint, 0, point},
       1,
       point,
       OwnCommitStop::kNo,
       "the ranks sync first",
       false},
      {"rank 0 holds the point: checkpoint", "stopped", member0, 0, point,
       OwnCommitStop::kCheckpoint, "the commit this worker holds", false},
      {"rank 1: just stops", "stopped", member0, 1, point, OwnCommitStop::kStop,
       "rank 1: rank 0 writes the checkpoint from its own commit", true},
      {"rank 2 holding nothing: just stops", "stopped", member0, 2, std::nullopt,
       OwnCommitStop::kStop, "rank 2", false},
      {"rank 0 holds another commit: no checkpoint", "stopped", member0, 0, At(2, 96, 39),
       OwnCommitStop::kNoCheckpoint,
       "error: the job stops at epoch 3 position 128 step 40, but this worker holds epoch 3 "
       "position 96 step 39: no checkpoint written",
       true},
      {"rank 0 holds the same step at another position: no checkpoint", "stopped", member0, 0,
       At(2, 0, 40), OwnCommitStop::kNoCheckpoint,
       "but this worker holds epoch 3 position 0 step 40", false},
      {"rank 0 holds no commit: no checkpoint", "stopped", member0, 0, std::nullopt,
       OwnCommitStop::kNoCheckpoint,
       "error: the job stops at epoch 3 position 128 step 40, but this worker holds no commit: "
       "no checkpoint written",
       true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const OwnCommitDecision d = StopAtOwnCommit(c.stop, c.source, c.rank, c.holds, std::nullopt);
    EXPECT_EQ(d.action, c.action);
    if (c.whole) {
      EXPECT_EQ(d.reason, c.reason);
    } else {
      EXPECT_TRUE(Contains(d.reason, c.reason)) << d.reason;
    }
  }
}

TEST(WorkerPolicyTest, StopAtOwnCommitWritesNoCheckpointTwice) {
  const StatePoint point = At(2, 128, 40);
  const StateSource member0{SourceKind::kMember, 0, point};
  struct Case {
    const char* name;
    int rank;
    std::optional<StatePoint> checkpointed;
    OwnCommitStop action;
  };
  const Case cases[] = {
      {"the boundary's checkpoint is of the point: just stop", 0, point, OwnCommitStop::kStop},
      {"an older checkpoint: write this one", 0, At(1, 0, 30), OwnCommitStop::kCheckpoint},
      {"none yet: write it", 0, std::nullopt, OwnCommitStop::kCheckpoint},
      {"rank 1 writes none either way", 1, point, OwnCommitStop::kStop},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const OwnCommitDecision d = StopAtOwnCommit("stopped", member0, c.rank, point, c.checkpointed);
    EXPECT_EQ(d.action, c.action) << d.reason;
  }
}

TEST(WorkerPolicyTest, AfterRendezvousFailure) {
  struct Case {
    double timeout_seconds;
    int64_t at_ms;  // from now = T(1000)
  };
  const Case cases[] = {{60, 61000}, {2.5, 3500}, {0.0015, 1001}, {0, 1000}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "rendezvous_timeout=" << c.timeout_seconds);
    const RendezvousGiveUp g =
        AfterRendezvousFailure("connection refused", T(1000), c.timeout_seconds);
    EXPECT_EQ(g.at, T(c.at_ms));
    EXPECT_EQ(g.error, "connection refused");
  }
}

TEST(WorkerPolicyTest, DecideWait) {
  const std::string give_up_text =
      "could not connect to the other workers of generation 7 (connection refused) and no "
      "membership change followed within --rendezvous-timeout: can the workers' machines reach "
      "each other? (docs/operations.md, Addresses)";
  const RendezvousGiveUp give_up{T(5000), "connection refused"};
  struct Case {
    const char* name;
    WaitInputs in;
    WaitAction action;
    bool reset_give_up;
    std::string reason;  // whole
  };
  // Fields: over, order_generation, rank_in_order, draining, connected, in_view,
  // last_generation, give_up, now.
  const Case cases[] = {
      {"nothing happened",
       {{}, {}, -1, false, true, true, 7, {}, T(0)},
       WaitAction::kWait,
       false,
       "no order yet"},
      {"the job is over",
       {std::string("done"), {}, -1, false, true, true, 7, {}, T(0)},
       WaitAction::kLeave,
       false,
       "the job is over: done"},
      {"over wins over everything else",
       {std::string("stopped"), 8, 0, true, false, false, 8, give_up, T(9000)},
       WaitAction::kLeave,
       false,
       "the job is over: stopped"},
      {"an order with this worker",
       {{}, 8, 2, false, true, false, 8, {}, T(0)},
       WaitAction::kRun,
       true,
       "generation 8: this worker is rank 2"},
      {"an order with this worker while draining: it runs (and drains at a boundary)",
       {{}, 8, 0, true, true, false, 8, {}, T(0)},
       WaitAction::kRun,
       true,
       "generation 8: this worker is rank 0"},
      {"an order without this worker: not admitted yet",
       {{}, 8, -1, false, true, false, 8, {}, T(0)},
       WaitAction::kSkip,
       true,
       "generation 8 does not include this worker (not admitted yet)"},
      {"an order without this draining worker: it left the job",
       {{}, 8, -1, true, true, true, 8, {}, T(0)},
       WaitAction::kLeave,
       true,
       "generation 8 goes on without this draining worker"},
      {"an order after the give-up time: run it, forget the give-up",
       {{}, 8, 1, false, true, true, 8, give_up, T(9000)},
       WaitAction::kRun,
       true,
       "generation 8: this worker is rank 1"},
      {"an order without this worker after the give-up time: skip, forget the give-up",
       {{}, 8, -1, false, true, true, 8, give_up, T(9000)},
       WaitAction::kSkip,
       true,
       "generation 8 does not include this worker (not admitted yet)"},
      {"the head is lost",
       {{}, {}, -1, false, false, true, 7, {}, T(0)},
       WaitAction::kReconnect,
       false,
       "the head's connection is lost"},
      {"the head is lost while draining and past the give-up: reconnect first",
       {{}, {}, -1, true, false, false, 7, give_up, T(9000)},
       WaitAction::kReconnect,
       false,
       "the head's connection is lost"},
      {"draining and in no view",
       {{}, {}, -1, true, true, false, 7, {}, T(0)},
       WaitAction::kLeave,
       false,
       "draining and in no membership view: nothing to finish"},
      {"draining and in no view, past the give-up: leave (cleanly)",
       {{}, {}, -1, true, true, false, 7, give_up, T(9000)},
       WaitAction::kLeave,
       false,
       "draining and in no membership view: nothing to finish"},
      {"draining but in the view: wait for the order",
       {{}, {}, -1, true, true, true, 7, {}, T(0)},
       WaitAction::kWait,
       false,
       "no order yet"},
      {"not draining and in no view: wait (not admitted yet)",
       {{}, {}, -1, false, true, false, 7, {}, T(0)},
       WaitAction::kWait,
       false,
       "no order yet"},
      {"before the give-up time",
       {{}, {}, -1, false, true, true, 7, give_up, T(4999)},
       WaitAction::kWait,
       false,
       "no order yet"},
      {"exactly at the give-up time: not yet",
       {{}, {}, -1, false, true, true, 7, give_up, T(5000)},
       WaitAction::kWait,
       false,
       "no order yet"},
      {"past the give-up time",
       {{}, {}, -1, false, true, true, 7, give_up, T(5001)},
       WaitAction::kGiveUp,
       false,
       give_up_text},
      {"past the give-up time, in no view",
       {{}, {}, -1, false, true, false, 7, give_up, T(60000)},
       WaitAction::kGiveUp,
       false,
       give_up_text},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const WaitDecision d = DecideWait(c.in);
    EXPECT_EQ(d.action, c.action);
    EXPECT_EQ(d.reset_give_up, c.reset_give_up);
    EXPECT_EQ(d.reason, c.reason);
  }
}

// The wait loop as worker.cc runs it, on a script of turns: a failed
// rendezvous, then turns without orders until the give-up, or an order that
// cancels it.
TEST(WorkerPolicyTest, RendezvousGiveUpIsCancelledByAnyOrder) {
  struct Turn {
    int64_t now_ms;
    std::optional<uint64_t> order;  // an order without this worker
    WaitAction action;
  };
  struct Case {
    const char* name;
    std::vector<Turn> turns;
  };
  const Case cases[] = {
      {"nothing comes: give up after --rendezvous-timeout",
       {{200, {}, WaitAction::kWait},
        {2000, {}, WaitAction::kWait},
        {2001, {}, WaitAction::kGiveUp}}},
      {"an order (even one without this worker) cancels it",
       {{200, {}, WaitAction::kWait},
        {1800, 8, WaitAction::kSkip},
        {2001, {}, WaitAction::kWait},
        {60000, {}, WaitAction::kWait}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // The rendezvous of generation 7 failed at 0 ms with --rendezvous-timeout=2.
    std::optional<RendezvousGiveUp> give_up = AfterRendezvousFailure("timed out", T(0), 2);
    uint64_t last_generation = 7;
    for (const Turn& turn : c.turns) {
      SCOPED_TRACE(testing::Message() << "at " << turn.now_ms << " ms");
      WaitInputs in;
      in.order_generation = turn.order;
      if (turn.order) last_generation = *turn.order;
      in.in_view = true;
      in.last_generation = last_generation;
      in.give_up = give_up;
      in.now = T(turn.now_ms);
      const WaitDecision d = DecideWait(in);
      if (d.reset_give_up) give_up.reset();
      EXPECT_EQ(d.action, turn.action) << d.reason;
      if (d.action == WaitAction::kGiveUp) {
        EXPECT_TRUE(Contains(d.reason, "generation 7 (timed out)")) << d.reason;
      }
    }
  }
}

TEST(WorkerPolicyTest, DecideReconnect) {
  HeadLost lost;
  lost.host = "10.0.0.1";
  lost.port = 29400;
  lost.job_id = "job-a";
  lost.holds = At(1, 64, 12);
  lost.timeout = milliseconds(60000);
  HeadLost holding_nothing = lost;
  holding_nothing.holds.reset();
  using Result = ReconnectAttempt::Result;
  const std::string other_job =
      "the head at 10.0.0.1:29400 came back with another job (job-b, this worker's is job-a): "
      "its driver was restarted without this job's --state-dir. This worker's commit at epoch 2 "
      "position 64 step 12 is not carried into another job; it exits";
  const std::string other_job_no_commit =
      "the head at 10.0.0.1:29400 came back with another job (job-b, this worker's is job-a): "
      "its driver was restarted without this job's --state-dir. This worker's state is not "
      "carried into another job; it exits";
  const std::string gave_up =
      "lost the connection to the head and it did not come back within 60000 ms (the node "
      "agent's head_reconnect_timeout); last attempt: connection refused";
  const std::string gave_up_at_once =
      "lost the connection to the head and it did not come back within 60000 ms (the node "
      "agent's head_reconnect_timeout); last attempt: connection reset by peer";
  struct Case {
    const char* name;
    const HeadLost* lost;
    ReconnectAttempt last;
    int64_t now_ms;  // the deadline is at 60000 ms
    ReconnectAction action;
    int64_t wait_ms;
    std::string reason;  // whole, or a part when `whole` is false
    bool whole;
  };
  const Case cases[] = {
      {"the start: attempt",
       &lost,
       {Result::kNone, "", "connection reset by peer"},
       0,
       ReconnectAction::kAttempt,
       0,
       "60000 ms left",
       false},
      {"after a wait, time left: attempt",
       &lost,
       {Result::kNone, "", "connection refused"},
       59999,
       ReconnectAction::kAttempt,
       0,
       "1 ms left",
       false},
      {"after a wait, exactly at the deadline: give up",
       &lost,
       {Result::kNone, "", "connection refused"},
       60000,
       ReconnectAction::kGiveUp,
       0,
       gave_up,
       true},
      {"after a wait, past the deadline: give up",
       &lost,
       {Result::kNone, "", "connection refused"},
       61000,
       ReconnectAction::kGiveUp,
       0,
       gave_up,
       true},
      {"no attempt before the deadline: the lost reason is the last error",
       &lost,
       {Result::kNone, "", "connection reset by peer"},
       60000,
       ReconnectAction::kGiveUp,
       0,
       gave_up_at_once,
       true},
      {"a failed attempt: wait 250 ms",
       &lost,
       {Result::kFailed, "", "connection refused"},
       100,
       ReconnectAction::kWait,
       250,
       "attempt failed (connection refused)",
       false},
      {"a failed attempt past the deadline: wait, then give up",
       &lost,
       {Result::kFailed, "", "connection refused"},
       65000,
       ReconnectAction::kWait,
       250,
       "retrying in 250 ms",
       false},
      {"the same job answers: join",
       &lost,
       {Result::kAnswered, "job-a", ""},
       100,
       ReconnectAction::kJoin,
       0,
       "answers for job job-a",
       false},
      {"the same job answers after the deadline: join anyway",
       &lost,
       {Result::kAnswered, "job-a", ""},
       90000,
       ReconnectAction::kJoin,
       0,
       "job-a",
       false},
      {"another job: fatal at once",
       &lost,
       {Result::kAnswered, "job-b", ""},
       100,
       ReconnectAction::kOtherJob,
       0,
       other_job,
       true},
      {"another job, holding no commit",
       &holding_nothing,
       {Result::kAnswered, "job-b", ""},
       100,
       ReconnectAction::kOtherJob,
       0,
       other_job_no_commit,
       true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ReconnectDecision d = DecideReconnect(*c.lost, c.last, T(c.now_ms), T(60000));
    EXPECT_EQ(d.action, c.action);
    EXPECT_EQ(d.wait, milliseconds(c.wait_ms));
    if (c.whole) {
      EXPECT_EQ(d.reason, c.reason);
    } else {
      EXPECT_TRUE(Contains(d.reason, c.reason)) << d.reason;
    }
  }
}

// The reconnect loop as worker.cc runs it, on a fake clock: each attempt
// takes `attempt_ms` and ends as scripted; a wait takes its 250 ms.
TEST(WorkerPolicyTest, ReconnectLoop) {
  using Result = ReconnectAttempt::Result;
  struct Case {
    const char* name;
    int64_t timeout_ms;
    int64_t attempt_ms;
    std::vector<ReconnectAttempt> script;  // the attempts' outcomes, in order (then: fail)
    ReconnectAction last;
    int attempts;
    int64_t ends_at_ms;
  };
  const ReconnectAttempt refused{Result::kFailed, "", "connection refused"};
  const ReconnectAttempt same{Result::kAnswered, "job-a", ""};
  const ReconnectAttempt other{Result::kAnswered, "job-b", ""};
  const Case cases[] = {
      {"back at the first attempt", 1000, 10, {same}, ReconnectAction::kJoin, 1, 10},
      {"back at the third", 1000, 10, {refused, refused, same}, ReconnectAction::kJoin, 3, 530},
      // Attempts start at 0, 260, 520, 780; the next wait ends at 1040, past 1000.
      {"never back: 250 ms apart until the deadline",
       1000,
       10,
       {},
       ReconnectAction::kGiveUp,
       4,
       1040},
      {"another job: at once", 1000, 10, {refused, other}, ReconnectAction::kOtherJob, 2, 270},
      {"a zero timeout: no attempt", 0, 10, {}, ReconnectAction::kGiveUp, 0, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    HeadLost lost;
    lost.host = "head";
    lost.port = 1;
    lost.job_id = "job-a";
    lost.timeout = milliseconds(c.timeout_ms);
    int64_t now = 0;
    const auto deadline = T(0) + lost.timeout;
    ReconnectAttempt last{Result::kNone, "", "connection reset"};
    int attempts = 0;
    ReconnectDecision d;
    for (int turn = 0; turn < 100; ++turn) {
      d = DecideReconnect(lost, last, T(now), deadline);
      if (d.action == ReconnectAction::kAttempt) {
        now += c.attempt_ms;
        last = attempts < static_cast<int>(c.script.size()) ? c.script[attempts] : refused;
        ++attempts;
      } else if (d.action == ReconnectAction::kWait) {
        now += d.wait.count();
        last.result = Result::kNone;  // the error is kept for the give-up
      } else {
        break;
      }
    }
    EXPECT_EQ(d.action, c.last) << d.reason;
    EXPECT_EQ(attempts, c.attempts);
    EXPECT_EQ(now, c.ends_at_ms);
    if (d.action == ReconnectAction::kGiveUp) {
      EXPECT_TRUE(Contains(d.reason, attempts > 0 ? "last attempt: connection refused"
                                                  : "last attempt: connection reset"))
          << d.reason;
    }
  }
}

}  // namespace
}  // namespace elastic::trainer
