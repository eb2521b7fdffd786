// The flags of the elastic (multi-process) trainer, added to the training
// flags of train_options.h on one FlagSet. docs/elastic.md is the protocol,
// docs/operations.md how to run it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/options.h"
#include "trainer/flags.h"
#include "trainer/train_options.h"

namespace elastic::trainer {

struct ElasticOptions {
  // What this process is. "" (the default) with --workers N: the driver;
  // with --join: a node agent only; "worker": a worker started by an agent.
  std::string role;
  int64_t workers = 0;  // local workers to start; 0: the single-process trainer
  // The driver runs the controller (head) only; every worker comes with --join.
  bool controller_only = false;
  std::string join;  // HOST:PORT of an existing head
  std::string token_file;
  std::string listen = "127.0.0.1";
  int64_t port = 0;  // 0: the OS picks one (printed at start)
  int64_t min_workers = 1;
  int64_t max_workers = 0;  // 0: no limit
  int64_t commit_every = 20;
  double drain_timeout = 30;   // seconds
  double let_go_below = 0.25;  // --let-go-below: of the median speed; 0: never
  // "commit": joins and graceful leaves take effect at the next commit;
  // "epoch": at the next epoch boundary. commit is the default: a joiner waits
  // --commit-every steps, not up to an epoch (on the p3 trace, with 4-second
  // epochs, both kept the same goodput: docs/benchmarks.md).
  std::string admit_at = "commit";
  double join_window = 3;          // seconds; after a mass loss, for joiners that register together
  double rendezvous_timeout = 60;  // seconds
  double heartbeat_timeout = 3;    // seconds of silence before a process is declared failed
  double reconnect_timeout = 60;   // seconds nodes and workers wait for a lost head
  // Samples an optimizer step takes whatever the world size; 0: --batch-size.
  // The same steps at every world is what let world 8 train like world 1 on
  // the CIFAR-10 subset (docs/training.md, "One global batch by default").
  int64_t global_batch = 0;
  // The Horovod/DDP tutorials' recipe instead: --batch-size per worker and lr
  // x world size, so that the step and the rate change as workers come and go.
  bool per_worker_batch = false;
  std::string log_samples;  // directory; "" = off
  // Rank 0 sends the controller a copy of the state every this many commits
  // (0: never; then losing every worker at once falls back to a checkpoint).
  // 5: a copy at every commit cost ResNet18 5-7% of images/s on 2 cores
  // (bench/state_copy_bench.py, docs/benchmarks.md).
  int64_t state_copy_every = 5;
  double step_timeout = 300;    // seconds a step may make no progress before its worker is dropped
  int64_t blacklist_after = 3;  // worker failures of one node before it is excluded
  double blacklist_seconds = 300;  // how long it stays excluded
  // The driver's Prometheus endpoint and the directory of its run report.
  std::string metrics_address = "127.0.0.1";
  int64_t metrics_port = 9464;
  // Every mode's, not only the elastic driver's: "": DefaultRunDirectory().
  std::string run_dir;
  // The controller's journal; a driver restarted with it takes the job over.
  std::string state_dir;
  // Where this machine's spot preemption notice appears (preemption_notice.h):
  // "gce", "aws", "gce:URL", "aws:URL" or a URL; "": SIGTERM only.
  std::string preemption_notice;
};

// Binds every ElasticOptions field to a flag of `flags`.
void RegisterElasticFlags(FlagSet& flags, ElasticOptions& options);

// Rejects impossible combinations with a FlagError naming the flag.
void ValidateElasticOptions(const ElasticOptions& options, const TrainOptions& train);

// The samples of one optimizer step whatever the world size: --global-batch,
// else --batch-size; 0 with --per-worker-batch (--batch-size per worker and
// lr x world size).
int64_t GlobalBatch(const ElasticOptions& options, const TrainOptions& train);

// The flags of the process scope that every mode takes, mpirun's ranks
// included (ValidateMpiRun): --run-dir, where every mode writes its events.
std::vector<std::string> ProcessFlagsOfEveryMode();

// --run-dir's default: runs/<date-time> in the directory the job was started
// from (`bazel run` runs the binary elsewhere and says where in
// BUILD_WORKING_DIRECTORY).
std::string DefaultRunDirectory();

// True when these options ask for the elastic trainer rather than the
// single-process loop (a worker, a driver with --workers, or --join).
bool IsElasticRun(const ElasticOptions& options);

// Splits "host:port"; throws FlagError naming --join when malformed.
void ParseHostPort(const std::string& text, std::string* host, uint16_t* port);

// The runtime connections of a job's processes: --heartbeat-timeout, and a
// heartbeat every tenth of it (the runtime's own ratio, 100 ms of 1 s). Thirty
// per timeout, as before, cost a head of 1,024 members ~20,000 heartbeats a
// second in and out of its one thread, for no faster detection.
runtime::TransportOptions TransportFor(const ElasticOptions& options);

}  // namespace elastic::trainer
