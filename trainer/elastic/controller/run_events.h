// The job's structured event log: <--run-dir>/events.jsonl, one JSON object
// per line, appended by the driver as the job goes (docs/events.md documents
// every event and field; it is an interface for users' tooling, as
// torchelastic's events are, and what the end-to-end tests read instead of
// the progress lines). The events are typed here; RenderEvent turns one into
// its line, and EventLog appends lines to the file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "monitoring/run_history.h"
#include "trainer/elastic/controller/job_controller.h"
#include "trainer/elastic/controller/notices.h"

namespace elastic::trainer {

// The version of the events' format, in every "start" event. Fields are only
// ever added; a change that removes or redefines one bumps it.
inline constexpr int kEventsFormat = 1;

namespace run_event {
// The driver started the job, or took it over from its journal.
struct Start {
  std::string job_id;
  bool taken_over = false;
  std::string model;    // --model, or the --model-file path
  std::string dataset;  // --dataset
  int64_t epochs = 0;
  int64_t workers = 0;      // --workers of the driver's own machine
  std::string metric;       // "accuracy" or "token accuracy"
  std::string head;         // the address and port its head listens on, "ADDR:PORT"
  std::string metrics_url;  // its Prometheus endpoint; empty when it serves none
};
// A new membership view: the controller published it (its reason), or the
// head's view changed by itself (reason "membership": a worker failed or left).
struct View {
  uint64_t generation = 0;
  std::vector<uint64_t> members;
  std::string reason;
};
// The controller told a published view's members to form their generation.
struct Generation {
  uint64_t generation = 0;
  std::vector<uint64_t> members;  // rank r is members[r]
  StateSource source;             // where its state comes from
  std::string reason;
  std::string stop;  // non-empty: the generation only syncs and stops
};
// A member restored its generation's state: the checksum of its parameters.
struct Params {
  uint64_t generation = 0;
  uint64_t member = 0;
  int rank = 0;
  int world = 0;
  uint64_t checksum = 0;
  StatePoint point;
  int pid = 0;  // the member's process, on its machine
};
struct Join {  // a worker registered
  uint64_t member = 0;
  uint64_t node = 0;
  std::optional<StatePoint> holds;  // the commit it has in memory
  int pid = 0;                      // its process, on its machine
  std::string address;              // where it listens for its peers (actors, collectives)
  int64_t step = 0;                 // the job's steps in all, as rank 0 last reported them
};
struct Leave {  // a worker is gone
  uint64_t member = 0;
  uint64_t node = 0;
  std::string reason;  // "left", "failed" or "gone while the head session was lost"
  std::string detail;  // the head's words: why it failed, how its process exited...
};
struct Draining {  // a worker asked to leave at the next commit
  uint64_t member = 0;
  // Why; empty when it was told to (SIGTERM, a preemption notice). A worker
  // too slow to be worth keeping says so (--let-go-below).
  std::string reason;
};
struct Fault {
  uint64_t generation = 0;
  uint64_t member = 0;
  std::string reason;
  bool state_unavailable = false;
};
struct Commit {  // a commit report: rank 0's at every commit, every rank's at a stop
  uint64_t generation = 0;
  StatePoint point;
  uint64_t member = 0;  // who reported it
  bool stop = false;    // the generation stopped here as the controller asked
};
struct Shares {  // a commit re-planned how a step is split (trainer/shares.h)
  uint64_t generation = 0;
  StatePoint point;
  int64_t step_samples = 0;
  struct Worker {
    uint64_t member = 0;
    int64_t share = 0;
    double speed = 0;     // samples a second of its own work
    double slowdown = 0;  // times slower than the median
  };
  std::vector<Worker> workers;  // in rank order
};
struct ControllerCopy {  // the controller now holds the state of `point`
  StatePoint point;
  std::string file;  // in --state-dir; empty: in the driver's memory only
};
struct Checkpoint {
  StatePoint point;
  std::string path;
  bool from_controller_copy = false;  // written by the driver, no worker being left
};
struct FirstStep {  // the first step of a generation, after its membership change
  uint64_t generation = 0;
  int64_t world = 0;
  double seconds = 0;  // from the membership change
};
struct Epoch {
  int64_t epoch = 0;  // 1-based
  int64_t epochs = 0;
  int world = 0;
  double train_loss = 0;
  double train_metric = 0;  // in [0, 1]
  double test_loss = 0;
  double test_metric = 0;
  double samples_per_second = 0;
  double tokens_per_second = 0;  // 0 unless the job trains on token windows
  double seconds = 0;
  std::string arithmetic;    // rank 0's precision and memory format, e.g. "bf16, channels-last"
  double learning_rate = 0;  // at the epoch's last step
};
struct Evaluation {  // an evaluation inside an epoch (--eval-every)
  int64_t step = 0;
  int64_t epoch = 0;
  double epoch_fraction = 0;
  int world = 0;
  double test_loss = 0;
  double test_metric = 0;
  double seconds = 0;
};
struct Done {  // rank 0 trained the last step
  uint64_t generation = 0;
  int64_t epochs = 0;
  int64_t steps = 0;
  double test_metric = 0;
  bool early_stop = false;
};
struct End {  // the job is over; the driver exits with exit_code
  int exit_code = 0;
  std::string reason;
};
// The controller's notices that are facts (EventOfNotice):
struct Blacklisted {  // a node's workers kept failing: they are not admitted for a while
  uint64_t node = 0;
  double seconds = 0;  // how long
  int64_t failures = 0;
};
struct Unblacklisted {  // a node's blacklisting ran out
  uint64_t node = 0;
};
struct Stalled {       // the driver's own process stalled (stopped, starved of CPU)
  double seconds = 0;  // the gap in its clock ticks
};
struct BelowMinWorkers {  // fewer workers than --min-workers: it waits up to --rendezvous-timeout
  int64_t workers = 0;
  int64_t min_workers = 0;
};
struct NoWorkers {     // every worker is gone: the job waits for joiners
  StateSource source;  // where it continues from
};
struct Error {          // an error that ends the job
  std::string kind;     // a stable name: "state_lost", "below_min_workers", ...
  std::string message;  // the printed line's words after "driver: error: "
};
}  // namespace run_event

using RunEvent =
    std::variant<run_event::Start, run_event::View, run_event::Generation, run_event::Params,
                 run_event::Join, run_event::Leave, run_event::Draining, run_event::Fault,
                 run_event::Commit, run_event::Shares, run_event::ControllerCopy,
                 run_event::Checkpoint, run_event::FirstStep, run_event::Epoch,
                 run_event::Evaluation, run_event::Done, run_event::End, run_event::Blacklisted,
                 run_event::Unblacklisted, run_event::Stalled, run_event::BelowMinWorkers,
                 run_event::NoWorkers, run_event::Error>;

// The event's line (no newline): {"event": NAME, "unix_ms": T, ...fields}.
std::string RenderEvent(const RunEvent& event, int64_t unix_ms);

// The event a controller's notice is logged as, where it is a fact worth
// machine-reading (a blacklisting, a stall, too few workers, an error that
// ends the job); nothing for the others, which are only printed.
std::optional<RunEvent> EventOfNotice(const Notice& notice);

// Appends events to one file, each line with a single write(2) to a file
// opened O_APPEND: a reader never sees half a line but perhaps the last one
// of a process killed mid-write, and a driver that takes a job over appends
// to the same file. Writing must not stop training: a failure is passed to
// `warn` once, and the events after it are dropped until a write succeeds.
class EventLog {
 public:
  using Warn = std::function<void(const std::string&)>;
  // Creates `path`'s directory if needed. Throws if the file cannot be opened.
  EventLog(const std::string& path, Warn warn);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  void Append(const RunEvent& event);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  Warn warn_;
  int fd_ = -1;
  bool failing_ = false;
};

// The file's name in the run directory.
inline constexpr char kEventsFile[] = "events.jsonl";

// What the run report draws (monitoring/run_report.h), read back from an
// event log: the epochs, and the world size at every view with why it
// changed (a join, a graceful leave, a failure), timed from the log's first
// event. A log that holds several drivers of one job (a take-over) is one
// run. Lines that are not events (a half-written last one) are skipped.
monitoring::RunSeries SeriesFromEvents(const std::string& path);

}  // namespace elastic::trainer
