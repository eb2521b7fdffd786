// Fixed-size data-parallel jobs under mpirun (docs/operations.md):
//
//   mpirun -np 4 cifar [training flags]
//
// trains one job of four ranks over the MPI communicator, with no head and no
// elastic membership. The mode is detected, not asked for: a process started
// by mpirun is one rank of such a job. This header decides that and checks the
// flags; it needs neither MPI nor LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/flags.h"

namespace elastic::trainer {

// True when mpirun started this process (Open MPI sets OMPI_COMM_WORLD_SIZE in
// the environment of every rank it starts).
bool StartedByMpirun();

// The elastic flags describe a job whose workers come and go; mpirun's world is
// fixed. Throws FlagError naming the first flag `flags` was given that is
// neither of the training scope (FlagScope) nor one of `every_mode`, the
// process flags that every mode takes (--run-dir: the registering side's
// ProcessFlagsOfEveryMode). Which flags those are is what each flag declares
// where it is registered, not a list kept here.
void ValidateMpiRun(const FlagSet& flags, const std::vector<std::string>& every_mode = {});

// LibTorch threads per rank when --threads is 0: the cores of this machine
// shared among mpirun's ranks on it (OMPI_COMM_WORLD_LOCAL_SIZE), at least 1.
// LibTorch's own default (all cores in every rank) oversubscribes them.
int64_t MpiThreadsPerRank();

}  // namespace elastic::trainer
