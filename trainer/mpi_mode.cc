#include "trainer/mpi_mode.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace elastic::trainer {

bool StartedByMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

void ValidateMpiRun(const ElasticOptions& o) {
  const ElasticOptions d;
  const struct {
    const char* flag;
    bool set;
  } elastic_flags[] = {
      {"--workers", o.workers != d.workers},
      {"--join", o.join != d.join},
      {"--role", o.role != d.role},
      {"--token-file", o.token_file != d.token_file},
      {"--listen", o.listen != d.listen},
      {"--port", o.port != d.port},
      {"--min-workers", o.min_workers != d.min_workers},
      {"--max-workers", o.max_workers != d.max_workers},
      {"--commit-every", o.commit_every != d.commit_every},
      {"--drain-timeout", o.drain_timeout != d.drain_timeout},
      {"--rendezvous-timeout", o.rendezvous_timeout != d.rendezvous_timeout},
      {"--global-batch", o.global_batch != d.global_batch},
      {"--per-worker-batch", o.per_worker_batch != d.per_worker_batch},
      {"--log-samples", o.log_samples != d.log_samples},
      {"--blacklist-after", o.blacklist_after != d.blacklist_after},
      {"--blacklist-seconds", o.blacklist_seconds != d.blacklist_seconds},
      {"--metrics-address", o.metrics_address != d.metrics_address},
      {"--metrics-port", o.metrics_port != d.metrics_port},
      {"--run-dir", o.run_dir != d.run_dir},
      {"--state-dir", o.state_dir != d.state_dir},
      {"--reconnect-timeout", o.reconnect_timeout != d.reconnect_timeout},
  };
  for (const auto& f : elastic_flags) {
    if (f.set) {
      throw FlagError(std::string(f.flag) +
                      " is a flag of the elastic trainer, but this process was started by "
                      "mpirun, which trains one job of the fixed size -np (one rank per "
                      "process, --batch-size per rank, lr x ranks). Run either mpirun without "
                      "elastic flags, or the elastic trainer without mpirun");
    }
  }
}

int64_t MpiThreadsPerRank() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int64_t ranks_here = local != nullptr ? std::max(1L, std::atol(local)) : 1;
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max<int64_t>(1, cores / ranks_here);
}

}  // namespace elastic::trainer
