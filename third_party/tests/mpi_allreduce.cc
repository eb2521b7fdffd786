// Open MPI is wired in: every rank contributes rank+1; the allreduced sum must be
// n(n+1)/2 on every rank. Exit code 0 only when all ranks agree.
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long local = rank + 1, sum = 0;
  MPI_Allreduce(&local, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  const long expected = static_cast<long>(size) * (size + 1) / 2;
  int ok = (sum == expected) ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  std::printf("rank %d of %d: sum %ld (expected %ld)\n", rank, size, sum, expected);
  MPI_Finalize();
  return (all_ok == 1 && size >= 2) ? 0 : 1;
}
