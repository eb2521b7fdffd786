#include "trainer/elastic/elastic_options.h"

#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "trainer/elastic/preemption_notice.h"

namespace elastic::trainer {

void RegisterElasticFlags(FlagSet& f, ElasticOptions& o) {
  // What this process is and where it serves: never part of the job's spec.
  f.SetScope(FlagScope::kProcess);
  f.AddInt("workers", &o.workers,
           "elastic: start the driver (head + local node agent) and this many worker processes; "
           "with --join, the number of workers this node adds. 0: train in this process");
  f.AddBool("controller-only", &o.controller_only,
            "elastic: run the job's controller (head) and no workers, e.g. on a small on-demand "
            "machine; every worker comes with --join. Training starts once --min-workers "
            "workers joined");
  f.AddString("join", &o.join,
              "elastic: HOST:PORT of a running driver's head; run only a node agent that adds "
              "--workers workers (needs --token-file)");
  f.AddString("token-file", &o.token_file,
              "elastic: file holding the cluster token. The driver reads it (required when "
              "--listen is not loopback), --join needs it; without it the driver makes a random "
              "token");
  f.AddString("listen", &o.listen, "elastic: address the driver's head listens on");
  f.AddInt("port", &o.port,
           "elastic: port of the driver's head; its job controller listens on the next one "
           "(open both to other machines); 0: any free ports (printed)");
  // The job's elastic behaviour: in its spec and journal, the same for every worker.
  f.SetScope(FlagScope::kElastic);
  f.AddInt("min-workers", &o.min_workers,
           "elastic: fewer workers than this pause training until joins arrive");
  f.AddInt("max-workers", &o.max_workers, "elastic: joins beyond this many workers wait; 0: none");
  f.AddInt("commit-every", &o.commit_every,
           "elastic: steps between in-memory commits (a failure redoes at most this many steps)");
  f.AddString("admit-at", &o.admit_at,
              "elastic: when joins and graceful leaves (SIGTERM, a preemption notice) take "
              "effect. commit: at the next commit (--commit-every), the rest of the epoch "
              "re-sharded over the new world, every sample still once; epoch: at the next epoch "
              "boundary, so that a joiner waits up to an epoch. commit is the default: a joiner "
              "trains within --commit-every steps, not up to an epoch (docs/benchmarks.md)",
              {"commit", "epoch"});
  f.AddDouble("join-window", &o.join_window,
              "elastic: after every worker was lost, joiners wait for others that register "
              "together, so that one generation forms at their full world: it starts once this "
              "many seconds passed with no new joiner (at most 4x this after the first), or at "
              "once when the job's largest world is back; later ones enter at the next commit. "
              "0: start with the first");
  f.AddDouble("drain-timeout", &o.drain_timeout,
              "elastic: with --admit-at=epoch, seconds a worker told to leave (SIGTERM) waits "
              "for the epoch boundary before it leaves at the next commit");
  f.AddDouble("let-go-below", &o.let_go_below,
              "elastic: a worker whose speed stays below this fraction of the median worker's "
              "for 3 plans of the shares in a row (--balance) leaves at the next commit, as a "
              "graceful leave (said, counted, not blacklisted), when a step without it is "
              "faster: what its samples add is less than what its part of the gradient "
              "allreduce costs every worker (docs/elastic.md). 0: never");
  f.AddDouble("rendezvous-timeout", &o.rendezvous_timeout,
              "elastic: seconds to wait below --min-workers before stopping with a checkpoint; "
              "also how long a worker whose communicator could not be built waits for a new "
              "membership view before it gives up");
  f.AddDouble("heartbeat-timeout", &o.heartbeat_timeout,
              "elastic: seconds without a heartbeat (sent every tenth of it when nothing else was) "
              "after which the head "
              "declares a worker or node failed, and a worker or node its head lost. A killed "
              "process is noticed at once by its closed connection; this only catches hung "
              "processes and dead links. Raise it on lossy networks; give every machine of a "
              "job the same value");
  f.AddDouble("reconnect-timeout", &o.reconnect_timeout,
              "elastic: seconds a node agent (--join) and its workers wait for a lost head, e.g. "
              "while the driver is restarted with --state-dir, reconnecting every 0.25 s; then "
              "the agent stops its workers and exits. Also how long the driver re-registers its "
              "controller after losing its own session with the head, and, after a stall of its "
              "own, waits for the workers that lost the head meanwhile to come back");
  f.AddInt("global-batch", &o.global_batch,
           "elastic: every optimizer step takes this many samples whatever the world size, "
           "split evenly over the workers, each training its share in micro-batches of at most "
           "--batch-size with one gradient allreduce per step; the learning rate is --lr at "
           "every world size, so a job trains the same steps whether 1 or 8 workers run it and "
           "however they come and go. Must be >= --workers and --max-workers. 0: --batch-size");
  f.AddBool("per-worker-batch", &o.per_worker_batch,
            "elastic: the Horovod/DDP tutorials' recipe instead of one global batch: each "
            "worker trains --batch-size samples a step and the learning rate is --lr x world "
            "size, so that the step and the rate change as workers come and go (ResNet18 at "
            "8 workers on the CIFAR-10 subset diverged with it: docs/training.md)");
  f.AddString("log-samples", &o.log_samples,
              "elastic (debug): directory where each worker logs the sample indices of every "
              "step with its (generation, epoch, position), and its typed events (generations "
              "joined and left: events-<id>.bin)");
  f.AddInt("state-copy-every", &o.state_copy_every,
           "elastic: rank 0 sends the controller a copy of the job's state every this many "
           "commits, so that losing every worker at once costs at most the steps since then; "
           "1: every commit (for small models; a 90 MB ResNet18 state at every commit cost "
           "5-7% of images/s on 2 cores); 0: no copy (a mass loss falls back to the newest "
           "checkpoint, else the job stops)");
  f.AddDouble("step-timeout", &o.step_timeout,
              "elastic: seconds a training step may make no progress before its worker is "
              "declared hung and leaves the job (collectives time out at half of it, at most "
              "60 s, and the controller re-forms the generation)");
  f.AddInt("blacklist-after", &o.blacklist_after,
           "elastic: a node whose workers failed this many times is excluded for a while");
  f.AddDouble("blacklist-seconds", &o.blacklist_seconds,
              "elastic: how long a blacklisted node stays excluded");
  f.SetScope(FlagScope::kProcess);
  f.AddString("metrics-address", &o.metrics_address,
              "elastic: address of the driver's Prometheus endpoint (/metrics); a local IPv4 "
              "address");
  f.AddInt("metrics-port", &o.metrics_port,
           "elastic: port of the driver's Prometheus endpoint; 0: any free port (printed). When "
           "the default is taken the job runs without an endpoint");
  f.AddString("state-dir", &o.state_dir,
              "elastic: directory of the controller's journal (the job's id, flags, generation "
              "and where its newest state is) and of its copy of the job's state (see "
              "--state-copy-every). A driver started again with the same --state-dir, --port "
              "and --token-file takes an unfinished job over: its workers reconnect and continue "
              "from the commit they hold, or from the copy when every worker was lost too. "
              "Empty: no journal (losing the driver ends the job)");
  // Of this process, but of every mode: one process and mpirun's ranks write
  // the log too (ProcessFlagsOfEveryMode).
  f.AddString("run-dir", &o.run_dir,
              "directory of the job's event log (events.jsonl: every generation, join, leave, "
              "fault, commit, checkpoint and epoch as a JSON line; docs/events.md), in every "
              "mode: one process, each rank under mpirun (give them a shared directory) and an "
              "elastic driver, which also writes its end-of-run report (report.html) there and, "
              "taking a job over, appends to the job's log. Empty: runs/<date-time> in the "
              "directory the job was started from");
  f.AddString("preemption-notice", &o.preemption_notice,
              "elastic: watch this machine's cloud for a spot preemption notice and drain its "
              "workers (they leave at the next commit; with --admit-at=epoch at the next epoch "
              "boundary, or the next commit after --drain-timeout) as soon as one appears: gce (30 "
              "s of notice), aws (120 s; "
              "IMDSv2), gce:URL or aws:URL (another metadata server), or an http(s) URL that "
              "answers 200 once a notice is out. Polled every second. Empty: only SIGTERM "
              "drains");
  f.AddString("role", &o.role, "internal: set by the node agent on the processes it starts.",
              {"", "worker"});
  f.SetScope(FlagScope::kTraining);
}

std::vector<std::string> ProcessFlagsOfEveryMode() { return {"run-dir"}; }

std::string DefaultRunDirectory() {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return std::string(cwd != nullptr ? cwd : ".") + "/runs/" + stamp;
}

bool IsElasticRun(const ElasticOptions& o) {
  return o.role == "worker" || o.workers > 0 || !o.join.empty() || o.controller_only;
}

void ParseHostPort(const std::string& text, std::string* host, uint16_t* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw FlagError("--join: expected HOST:PORT, got '" + text + "'");
  char* end = nullptr;
  const long value = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || value < 1 || value > 65535)
    throw FlagError("--join: bad port in '" + text + "'");
  *host = text.substr(0, colon);
  *port = static_cast<uint16_t>(value);
}

void ValidateElasticOptions(const ElasticOptions& o, const TrainOptions& t) {
  if (o.workers < 0) throw FlagError("--workers must be >= 0");
  if (!o.join.empty()) {
    std::string host;
    uint16_t port;
    ParseHostPort(o.join, &host, &port);
    if (o.workers < 1) throw FlagError("--join needs --workers K >= 1 (workers to add)");
    if (o.token_file.empty()) throw FlagError("--join needs --token-file (the cluster token)");
  }
  if (o.controller_only && !o.join.empty())
    throw FlagError("--controller-only and --join do not go together");
  if (o.controller_only && o.workers > 0)
    throw FlagError("--controller-only runs no workers: drop --workers (workers come with --join)");
  if (!o.state_dir.empty() && !o.join.empty())
    throw FlagError("--state-dir is the driver's: a node that joins keeps no journal");
  if (o.state_copy_every < 0) throw FlagError("--state-copy-every must be >= 0");
  if (!(o.step_timeout >= 1) || o.step_timeout > 86400)
    throw FlagError("--step-timeout must be in [1, 86400] seconds");
  // The controller listens on --port + 1.
  if (o.port < 0 || o.port > 65534) throw FlagError("--port must be in [0, 65534]");
  if (o.metrics_port < 0 || o.metrics_port > 65535)
    throw FlagError("--metrics-port must be in [0, 65535]");
  if (o.min_workers < 1) throw FlagError("--min-workers must be >= 1");
  if (o.max_workers < 0) throw FlagError("--max-workers must be >= 0");
  if (o.max_workers > 0 && o.max_workers < o.min_workers)
    throw FlagError("--max-workers must be >= --min-workers");
  if (o.workers > 0 && o.join.empty() && o.max_workers > 0 && o.workers > o.max_workers)
    throw FlagError("--workers is above --max-workers");
  if (o.commit_every < 1) throw FlagError("--commit-every must be >= 1");
  if (o.drain_timeout < 0) throw FlagError("--drain-timeout must be >= 0");
  if (!(o.join_window >= 0) || o.join_window > 600)
    throw FlagError("--join-window must be in [0, 600] seconds");
  if (o.rendezvous_timeout <= 0) throw FlagError("--rendezvous-timeout must be > 0");
  // Two heartbeat intervals at least, or one late heartbeat fails a healthy peer.
  if (!(o.heartbeat_timeout >= 0.2) || o.heartbeat_timeout > 3600)
    throw FlagError("--heartbeat-timeout must be in [0.2, 3600] seconds");
  if (!(o.reconnect_timeout >= 0) || o.reconnect_timeout > 86400)
    throw FlagError("--reconnect-timeout must be in [0, 86400] seconds");
  if (o.global_batch < 0) throw FlagError("--global-batch must be >= 0");
  if (o.per_worker_batch && o.global_batch > 0)
    throw FlagError("--per-worker-batch and --global-batch=" + std::to_string(o.global_batch) +
                    " do not go together: a step takes --batch-size per worker, or "
                    "--global-batch samples whatever the world size");
  const int64_t global_batch = GlobalBatch(o, t);
  // A worker without a sample of the step would only add communication.
  const std::string source =
      o.global_batch > 0 ? "--global-batch=" + std::to_string(global_batch)
                         : "the global batch (--batch-size=" + std::to_string(global_batch) + ")";
  if (global_batch > 0 && o.join.empty() && o.workers > global_batch)
    throw FlagError(source + " is below --workers=" + std::to_string(o.workers) +
                    ": each worker needs a sample of every step");
  if (global_batch > 0 && o.max_workers > global_batch)
    throw FlagError(source + " is below --max-workers=" + std::to_string(o.max_workers) +
                    ": each worker needs a sample of every step");
  if (o.blacklist_after < 1) throw FlagError("--blacklist-after must be >= 1");
  if (!o.preemption_notice.empty()) {
    if (o.controller_only)
      throw FlagError(
          "--preemption-notice drains the workers of this machine, and --controller-only runs "
          "none: give it to the --join nodes");
    ParseNoticeSource(o.preemption_notice);
  }
  if (o.role == "worker" && !o.join.empty())
    throw FlagError("--role=worker and --join do not go together");
}

int64_t GlobalBatch(const ElasticOptions& options, const TrainOptions& train) {
  if (options.per_worker_batch) return 0;
  return options.global_batch > 0 ? options.global_batch : train.batch_size;
}

runtime::TransportOptions TransportFor(const ElasticOptions& options) {
  runtime::TransportOptions transport;
  transport.heartbeat_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options.heartbeat_timeout * 1000));
  transport.heartbeat_interval = transport.heartbeat_timeout / 10;
  return transport;
}

}  // namespace elastic::trainer
