#include "trainer/mpi_mode.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace elastic::trainer {

bool StartedByMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

void ValidateMpiRun(const FlagSet& flags, const std::vector<std::string>& every_mode) {
  for (const std::string& name : flags.given()) {
    if (flags.ScopeOf(name) == FlagScope::kTraining) continue;
    if (std::find(every_mode.begin(), every_mode.end(), name) != every_mode.end()) continue;
    throw FlagError("--" + name +
                    " is a flag of the elastic trainer, but this process was started by "
                    "mpirun, which trains one job of the fixed size -np (one rank per "
                    "process, --batch-size per rank, lr x ranks). Run either mpirun without "
                    "elastic flags, or the elastic trainer without mpirun");
  }
}

int64_t MpiThreadsPerRank() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int64_t ranks_here = local != nullptr ? std::max(1L, std::atol(local)) : 1;
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max<int64_t>(1, cores / ranks_here);
}

}  // namespace elastic::trainer
