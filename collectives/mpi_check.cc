// Run under mpirun (mpi_communicator_test.sh): every op, dtype and size through
// the MPI backend, then the refusal to rebuild. Prints "rank R: PASS" on success.
#include <cstdio>
#include <string>

#include "collectives/mpi_communicator.h"
#include "collectives/testing/collective_checks.h"

namespace elastic::collectives {
namespace {

int Run() {
  MpiCommunicatorFactory factory;
  const Membership world = MpiCommunicatorFactory::WorldMembership();
  // A different membership is refused before anything is created.
  try {
    factory.Create({1, world.rank, world.size - 1});
    std::fprintf(stderr, "rank %d: rebuild for a smaller world was not refused\n", world.rank);
    return 1;
  } catch (const UnsupportedOperation& e) {
    if (world.rank == 0) std::printf("refused as expected: %s\n", e.what());
  }
  auto comm = factory.Create(world);
  testing::CheckAllOps(*comm, testing::AllDataTypes(), {1, 2, 3, 5, 7, 1000, 65537, 1000003});
  testing::CheckAsyncOverlap(*comm);
  testing::CheckLarge(*comm, /*every_type=*/true);
  // Same membership again: still refused, one communicator per process.
  try {
    factory.Create(world);
    std::fprintf(stderr, "rank %d: second communicator was not refused\n", world.rank);
    return 1;
  } catch (const UnsupportedOperation&) {
  }
  comm.reset();
  std::printf("rank %d: PASS\n", world.rank);
  return 0;
}

}  // namespace
}  // namespace elastic::collectives

int main() {
  try {
    return elastic::collectives::Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
}
