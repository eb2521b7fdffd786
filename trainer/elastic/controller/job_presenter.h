// What the driver shows of a job, decided apart from showing it: which
// membership views it announces, when the progress line starts over, which
// epoch summaries and evaluations stand when redone steps report them again,
// the rescale line of a generation's first step, what is said only once
// a member, and which failures to write --state-dir are said. No I/O and no clock: the controller
// actor (ControllerActor in driver.cc) passes the time in and carries the answers out (the lines,
// the event log, the metrics); the tests drive this class alone (job_presenter_test.cc).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace elastic::trainer {

// A generation's first step, as the rescale line says it.
struct Rescale {
  uint64_t generation = 0;
  size_t world = 0;
  std::string reason;             // why the controller started the generation
  double seconds_after_view = 0;  // from the driver's view of it to the workers' first step
};

// One job's decisions of what is shown (the file comment says which), in
// the order the driver takes its messages.
class JobPresenter {
 public:
  using Time = std::chrono::steady_clock::time_point;

  // A new job: nothing shown yet.
  JobPresenter() = default;
  // A job taken over from its journal, which names the last generation the
  // old controller published and the last epoch summary it printed.
  static JobPresenter TakenOver(uint64_t journal_generation, int64_t printed_epoch);

  // A membership view of `world` members, seen at `now`: true when it is
  // announced, being newer than any announced while the job is not over
  // (views arrive from the head and from this driver's own publications, an
  // older one sometimes after a newer one). An announced view waits for its
  // first step (FirstStep).
  bool AnnouncesView(uint64_t generation, size_t world, bool job_over, Time now);
  // The controller starts a generation for `reason`; the next rescale line names it.
  void GenerationStarting(std::string reason);
  // Rank 0's first step of `generation`, at `worker_wall_seconds` on its wall
  // clock; `wall_now` and `now` are the driver's wall and steady clocks. The
  // rescale to report, once for the newest announced view; nullopt for any
  // other step.
  std::optional<Rescale> FirstStep(uint64_t generation, double worker_wall_seconds, double wall_now,
                                   Time now);
  // Progress of 0-based `epoch` in `generation`: true when the progress line
  // starts over. A new generation redoes part of the epoch with another world,
  // so with another number of steps: that starts over like a new epoch.
  bool StartsProgressLine(int64_t epoch, uint64_t generation);
  // The summary of 1-based `epoch`: true when it stands. An epoch redone after
  // a failure between its summary and its boundary commit reports twice; the
  // first one stands.
  bool EpochSummaryStands(int64_t epoch);
  // The --eval-every evaluation at `step`: true when it stands. Steps redone
  // after a failure evaluate again; the first one stands.
  bool EvaluationStands(int64_t step);
  // `member` is draining: true the first time, when the event log says so
  // (the head repeats a draining member in every later update).
  bool LogsDraining(uint64_t member);
  // `member` sent statistics the metrics refuse: true the first time, when the
  // warning is said (a worker sends them every few seconds).
  bool WarnsOfBadStats(uint64_t member);
  // A write of the journal (--state-dir) failed with `error`: true when the
  // warning is said. A full disk fails every write alike: said once, and
  // again only for another error or after a write succeeded (JournalWritten).
  bool WarnsOfJournalFailure(const std::string& error);
  void JournalWritten() { journal_error_.clear(); }
  // A write of the controller's copy to --state-dir failed: true for the
  // first failure of a run of them (each names its own temporary file).
  bool WarnsOfCopyFailure() { return !std::exchange(copy_failing_, true); }
  // A copy was written: true when the writes before it had failed, so that
  // the driver says they work again.
  bool SaysCopyWrittenAgain() { return std::exchange(copy_failing_, false); }
  // Whether a publication's joins and leaves count as membership changes:
  // not those that form the first view of a job that has not started.
  bool CountsMembershipChanges(bool job_started) const;

  // The last epoch summary that stood (1-based; 0 none): the journal keeps it,
  // so that a controller taking the job over does not print it again.
  int64_t printed_epoch() const { return printed_epoch_; }

 private:
  uint64_t announced_generation_ = 0;  // the newest view announced, or the take-over's floor
  uint64_t generation_ = 0;            // the newest view this presenter announced; 0 none
  size_t world_ = 0;                   // its members
  Time generation_seen_;               // when it was announced
  bool first_step_seen_ = true;        // its first step was reported (true: no view yet)
  std::string reason_;                 // why the last generation started
  int64_t progress_epoch_ = -1;        // the progress line's epoch (0-based) ...
  uint64_t progress_generation_ = 0;   // ... and generation
  int64_t printed_epoch_ = 0;
  int64_t printed_eval_step_ = 0;
  std::set<uint64_t> draining_logged_;
  std::set<uint64_t> bad_stats_warned_;
  std::string journal_error_;  // the last journal failure said; empty: the last write worked
  bool copy_failing_ = false;  // the last copy write failed, and that was said
};

}  // namespace elastic::trainer
