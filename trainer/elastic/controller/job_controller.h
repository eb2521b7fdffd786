// The decisions of an elastic job's controller, as a pure state machine:
// events in, actions out, no clock, no threads, no sockets. The controller
// actor (ControllerActor in driver.cc) turns membership updates and the trainers'
// messages into events and carries the actions out; the tests drive this
// class alone (job_controller_test.cc).
//
// What it decides (docs/elastic.md):
// - when the first generation starts, and which workers form every later one
//   (joins and graceful leaves at commit points it asks rank 0 for; failures
//   as the head reports them; re-forming after a collective fault);
// - where each generation's state comes from: the members that hold the
//   newest commit, else the controller's own copy, else the newest
//   checkpoint; a freshly seeded model only while nothing was committed past
//   step 0. When every source is gone the job stops (exit 3) and says what
//   was lost; while an older one exists it goes on from that one;
// - after a take-over, how long to wait for the workers, and for the newest
//   commit when only they can have it; after a stall of its own process, how
//   long to wait for the workers it then lost before their state counts as lost;
// - when the job stops: done, too few workers for too long, stop signals,
//   state lost.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "trainer/elastic/controller/notices.h"
#include "trainer/elastic/controller/overloaded.h"
#include "trainer/elastic/exit_codes.h"
#include "trainer/elastic/protocol/state_source.h"
#include "trainer/state_point.h"

namespace elastic::trainer {

// The join window's bound, in windows after the first joiner: replacements
// that keep arriving one by one do not hold the job back for long.
inline constexpr int64_t kJoinWindows = 4;

// The join window of a job that nobody trains (ControllerConfig::join_window_ms):
// open from the first joiner until no more joined for a window, or for
// kJoinWindows windows at most.
class JoinWindow {
 public:
  // Opens at `now_ms` with `ready` workers.
  JoinWindow(size_t ready, int64_t now_ms);
  // `ready` workers could start a generation at `now_ms`: more than the window
  // ever had is an arrival, fewer (some left again) is none.
  void Count(size_t ready, int64_t now_ms);
  // No arrival for `window_ms`, or kJoinWindows windows since it opened.
  bool Closed(int64_t now_ms, int64_t window_ms) const;

 private:
  int64_t opened_ms_;
  int64_t last_arrival_ms_;
  size_t gathered_;  // joiners at the last arrival
};

struct ControllerConfig {
  int64_t initial_workers = 1;  // registered workers that start the job at once
  int64_t min_workers = 1;
  int64_t max_workers = 0;  // 0: no limit
  // Time to gather initial_workers before starting with min_workers (ms).
  int64_t start_timeout_ms = 120000;
  int64_t rendezvous_timeout_ms = 60000;  // below min_workers, at most this long
  int64_t drain_timeout_ms = 30000;       // a draining worker leaves at a commit after this
  // Joins and graceful leaves take effect at the next commit (the rest of the
  // epoch re-sharded over the new world); false: at the next epoch boundary
  // (drains at a commit only after drain_timeout_ms).
  bool admit_at_commit = true;
  // While nobody trains after the job started (every worker lost), joiners
  // wait for others that register together: the generation starts once this
  // long passed with no new joiner (at most kJoinWindows times this after the
  // first), or as soon as the largest world trained so far is back; later
  // ones enter like any join (ms; 0: at once).
  int64_t join_window_ms = 3000;
  int64_t blacklist_after = 3;  // failures of one node
  int64_t blacklist_ms = 300000;
  bool resume = false;  // the first generation reads --checkpoint-dir
  // After rank 0's stop report, the others' reports are waited for this long
  // at most (a report lost on the way must not hold the job).
  int64_t stop_report_wait_ms = 10000;
  // Faults with no commit in between for this long stop the job (exit 3).
  int64_t fault_give_up_ms = 360000;
  // The controller is fed a tick every 50 ms: a gap longer than this between
  // two ticks means its own process stalled (stopped, starved of CPU). Workers
  // that saw the head silent past --heartbeat-timeout meanwhile dropped their
  // sessions and come back as new members holding their commits; the head
  // reported them failed, but their state may not be gone (ms; 0: not judged).
  int64_t stall_ms = 0;
  // Failures reported this long after such a stall may be its doing: the head
  // learns at once of sessions dropped during it, and forgives any silence it
  // saw itself (runtime/heartbeat_check.h), so a later failure is one it judged
  // while running: the heartbeat timeout (ms). They count against no node.
  int64_t stall_aftermath_ms = 3000;
  // A loss of every source of the state in that aftermath waits this long for
  // the workers to come back before the state is declared lost: their
  // --reconnect-timeout, after which those that did not come back gave up (ms).
  int64_t stall_grace_ms = 60000;
};

// What a controller restarted from its journal knows of the job.
struct RecoveredJob {
  uint64_t generation = 0;  // the last one published
  std::optional<StatePoint> newest;
  uint32_t world_of_newest = 0;  // how many members held it
  std::optional<StatePoint> checkpoint;
  std::optional<StatePoint> copy;  // the controller's copy it left in --state-dir
  // Wait this long for the members of the last generation, and for a holder
  // of the newest commit when no other source has it, to come back (ms).
  int64_t wait_ms = 30000;
};

namespace event {
struct Tick {};
// A worker registered with the head; `holds` is the commit it has in memory
// (a worker that outlived a controller restart).
struct Registered {
  uint64_t member = 0;
  uint64_t node = 0;
  std::optional<StatePoint> holds;
};
struct Gone {  // left on purpose, or failed (connection lost, silent)
  uint64_t member = 0;
  bool failed = false;
  // Its node, as the head registered it (0: none, or not known). A failure
  // counts against this node even when the member's Registered never came:
  // a worker that dies before the controller handled its hello.
  uint64_t node = 0;
};
struct Exited {};  // a node agent saw a worker process exit
struct ViewChanged {
  uint64_t generation = 0;
  std::vector<uint64_t> members;
};
struct Draining {
  uint64_t member = 0;
};
// A commit report: rank 0's at every commit; at a stop the controller asked
// for, every rank's (the next view waits until no rank is in a collective).
struct Commit {
  uint64_t generation = 0;
  StatePoint point;
  bool copy = false;  // the controller now holds this state
  bool stopped_on_request = false;
  uint64_t member = 0;  // who reports; 0: rank 0 (as before every rank reported)
};
struct Synced {
  uint64_t generation = 0;
  StatePoint point;
  bool copy = false;  // the controller now holds this state
};
struct CheckpointWritten {
  StatePoint point;
};
struct Fault {
  uint64_t generation = 0;
  uint64_t member = 0;
  std::string reason;
  bool state_unavailable = false;
};
struct Done {  // rank 0 of `generation` trained the last step
  uint64_t generation = 0;
};
struct StopSignal {
  int count = 0;  // signals so far: 1 at the next epoch boundary, 2 at the next commit
  std::string name;
};
}  // namespace event

using Event = std::variant<event::Tick, event::Registered, event::Gone, event::Exited,
                           event::ViewChanged, event::Draining, event::Commit, event::Synced,
                           event::CheckpointWritten, event::Fault, event::Done, event::StopSignal>;

namespace action {
// Publish this ordered list as the next generation's view (a ViewChanged
// event follows).
struct Publish {
  std::vector<uint64_t> members;
  std::string reason;
};
// Tell every member of a published view its rank and state source.
struct StartGeneration {
  uint64_t generation = 0;
  std::vector<uint64_t> members;
  StateSource source;
  std::string stop;  // non-empty: sync, rank 0 writes a checkpoint, everyone exits
  std::string reason;
  // Rank 0 sends the state it synced: it comes from a member and is newer than
  // the controller's copy, which would otherwise stay older until the next
  // copy (a controller restarted before it would train those steps again).
  bool send_copy = false;
};
struct RequestStop {  // to rank 0 of `generation`
  uint64_t generation = 0;
  uint64_t member = 0;
  bool at_next_commit = false;
};
struct TellOver {  // a member outside every view: the job is over for it
  uint64_t member = 0;
  std::string reason;
};
// Tell the user (a line the driver prints, notices.h); the facts among the
// notices go to the event log too.
struct Notify {
  Notice notice;
};
// The job stops with no worker left: the controller writes its copy (of
// `point`, newer than any checkpoint) as the checkpoint.
struct WriteCopy {
  StatePoint point;
};
struct Journal {};  // durable facts changed
struct Finish {     // the job is over: wait for everyone to leave, exit with code
  int exit_code = 0;
  std::string reason;  // why, in a few words ("the job is done", "stopped by SIGTERM ...")
};
}  // namespace action

using Action =
    std::variant<action::Publish, action::StartGeneration, action::RequestStop, action::TellOver,
                 action::Notify, action::WriteCopy, action::Journal, action::Finish>;

class JobController {
 public:
  // A new job; `now_ms` is the controller's clock at start.
  JobController(ControllerConfig config, int64_t now_ms);
  // A job taken over from a journal: it started, and its workers may come back.
  JobController(ControllerConfig config, const RecoveredJob& recovered, int64_t now_ms);

  std::vector<Action> Handle(const Event& event, int64_t now_ms);

  // For the actor, the journal and the tests.
  bool started() const { return started_; }
  bool finished() const { return std::holds_alternative<Finished>(phase_); }
  uint64_t generation() const { return generation_; }
  const std::vector<uint64_t>& view() const { return view_; }
  std::optional<StatePoint> newest() const { return newest_; }
  std::optional<StatePoint> copy() const { return copy_; }
  std::optional<StatePoint> checkpoint() const { return checkpoint_; }
  size_t world_of_newest() const { return holders_.size(); }

 private:
  struct Member {
    uint64_t node = 0;
    bool draining = false;
    int64_t draining_since_ms = 0;
    std::optional<StatePoint> holds;
  };

  // The phases of a job, each with the state that exists only in it.
  //
  // Starting: a new job gathers --workers (start_timeout_ms, then
  //   --min-workers). It publishes the first view and runs (Idle until that
  //   view comes), or finishes.
  // Recovering: a controller restarted from its journal waits for the
  //   workers and the newest commit. It publishes who came back and runs, or
  //   stops with a checkpoint.
  // Running: the sub-phase of the current view, set by every ViewChanged:
  //   Training: a view at or above --min-workers trains, nothing asked of it.
  //     Joins, leaves or a stop signal ask rank 0 to stop: StopAwaited.
  //   StopAwaited: rank 0 was asked to stop; the view's ranks report the stop
  //     commit. Once all did (or stop_report_wait_ms after rank 0's), the next
  //     view is published, or the job stops: Stopping.
  //   A view below --min-workers trains nothing; Run fills it from the
  //   pending workers as soon as enough registered:
  //   Idle: no wait runs (the view just came, or its successor is published).
  //   TooFew: too few workers, for at most rendezvous_timeout_ms: Stopping.
  //   Gathering: enough workers, but the job trained before and more may
  //     come together (join_window_ms): the view is published when it closes.
  //   These three survive a view the head publishes that is still below
  //   --min-workers (a wait is not restarted by a failure).
  // Stopping: a stop generation (rank 0 writes the checkpoint) is published;
  //   its view finishes the job.
  // Finished: the job is over; workers that still come are told why.
  struct Starting {
    int64_t since_ms = 0;
    int64_t exited = 0;  // worker processes seen exiting (before they registered)
  };
  struct Recovering {
    int64_t since_ms = 0;
    uint32_t world = 0;   // members that held the newest commit before
    int64_t wait_ms = 0;  // RecoveredJob::wait_ms
  };
  struct Training {};
  struct StopAwaited {
    bool at_next_commit = false;          // what rank 0 was asked
    std::optional<int64_t> committed_at;  // when rank 0 reported the commit it stopped at
    std::set<uint64_t> stopped;           // members of the view out of the stop's collective
  };
  struct Idle {};
  struct TooFew {
    int64_t since_ms = 0;
  };
  struct Gathering {
    JoinWindow window;
  };
  struct Stopping {
    std::string why;  // the stop generation's reason, and the job's at its end
  };
  struct Finished {
    std::string reason;  // what members outside the last view are told
  };
  using Phase = std::variant<Starting, Recovering, Training, StopAwaited, Idle, TooFew, Gathering,
                             Stopping, Finished>;

  void OnTick();
  void OnRegistered(const event::Registered& e);
  void OnGone(const event::Gone& e);
  void OnViewChanged(const event::ViewChanged& e);
  void OnDraining(const event::Draining& e);
  void OnCommit(const event::Commit& e);
  // Every live member of the view is out of the stop's collective.
  bool EveryoneStopped(const StopAwaited& awaited) const;
  void StoppedOnRequest();
  // Every member of the view drains at once: keep the job with the copy, or stop.
  void EveryoneLeft();
  void OnSynced(const event::Synced& e);
  void OnCheckpointWritten(const event::CheckpointWritten& e);
  void OnFault(const event::Fault& e);
  void OnDone(const event::Done& e);
  void OnStopSignal(const event::StopSignal& e);

  void Start(Starting starting);
  void Recover(Recovering recovering);
  void Run();
  // Joins, leaves or a stop signal in a view that trains: ask rank 0 to stop
  // (once per generation, again only to make it stop sooner).
  void AskToStop(bool changes, bool drain_expired);
  // A view below --min-workers: publish one from the pending workers when
  // enough are there (and the join window closed), else wait for them, and
  // stop after --rendezvous-timeout.
  void Refill(const std::vector<uint64_t>& staying, std::vector<uint64_t> joining);
  // The running sub-phase of view_ (a new view, or the first after Starting or
  // Recovering): one that trains starts afresh; one below --min-workers keeps
  // the wait it is in.
  void EnterView();
  bool Running() const;  // in one of the sub-phases of a running view
  // The pending members that may join now (not draining, not blacklisted
  // unless `blacklisted_too`), up to --max-workers with `staying` in the view.
  std::vector<uint64_t> Joinable(size_t staying, bool blacklisted_too = false);
  bool Blacklisted(uint64_t node);
  // Nobody trains and `ready` workers could start a generation: whether to
  // start it now or to wait, within --join-window, for more that join
  // together (Gathering).
  bool JoinWindowOver(size_t ready);
  // Members holding the newest commit first (a holder then broadcasts), the order kept otherwise.
  void SortNewestFirst(std::vector<uint64_t>& ids);
  StateSource SourceFor(const std::vector<uint64_t>& members) const;
  std::optional<StatePoint> NewestAvailable() const;
  // Nothing was committed past the seeded model (step 0) the job started
  // from: a fresh model loses nothing but the steps since (not with --resume).
  bool NothingCommittedYet() const;
  // Some source of the state is left: a holder, a copy, a checkpoint, or the
  // seeded model while nothing was committed.
  bool StateAvailable() const { return NewestAvailable() || NothingCommittedYet(); }
  // Ends the job at its last commit: the members sync on it, rank 0 writes a
  // checkpoint, all exit; with nobody left, says what is lost.
  void StopWithCheckpoint(const std::vector<uint64_t>& members, const std::string& why);
  void StateLost(StateLoss loss);
  // A tick gap past config_.stall_ms: a stall's aftermath begins.
  void NoticeStall(bool tick);
  bool InStallAftermath() const {
    return stalled_at_ && now_ - *stalled_at_ <= config_.stall_aftermath_ms;
  }
  // StateLost, unless this process stalled a moment ago: then the holders may
  // only have lost the head, and the decision waits up to stall_grace_ms for
  // them (Run takes it when no source came back).
  void StateLostUnlessStalled(StateLoss loss);
  // `view_finishes`: the members of the last view end on their own (the job
  // is done in their generation) and are not told; so are those of a stop
  // generation.
  void Finish(int exit_code, std::string reason, bool view_finishes = false);
  void Publish(std::vector<uint64_t> members, const std::string& reason);
  void Notify(Notice notice);

  ControllerConfig config_;
  int64_t now_ = 0;
  Phase phase_;
  std::vector<Action> out_;

  std::map<uint64_t, Member> members_;  // live and registered
  uint64_t generation_ = 0;
  std::vector<uint64_t> view_;
  bool publishing_ = false;  // a Publish is out and its ViewChanged not yet seen
  std::string next_reason_;  // of the view published next
  bool started_ = false;     // the first sync happened: no fresh model from now on

  std::optional<StatePoint> newest_;  // the newest commit reported
  std::set<uint64_t> holders_;        // members that hold newest_
  std::optional<StatePoint> copy_;    // the controller's copy
  std::optional<StatePoint> checkpoint_;

  size_t largest_world_ = 0;  // of the generations that trained
  int stop_signals_ = 0;
  std::string stopped_by_;
  std::set<uint64_t> faulted_;             // generations re-formed after a fault
  std::optional<int64_t> faulting_since_;  // first fault with no commit since

  std::optional<int64_t> last_tick_ms_;
  std::optional<int64_t> stalled_at_;  // when the last stall was noticed
  // Every source was lost in a stall's aftermath, then: any phase can lose
  // them (a fault while recovering too), and Run waits up to stall_grace_ms.
  std::optional<int64_t> lost_in_stall_at_;

  std::map<uint64_t, int64_t> failures_by_node_;
  std::map<uint64_t, int64_t> blacklisted_until_;
};

}  // namespace elastic::trainer
