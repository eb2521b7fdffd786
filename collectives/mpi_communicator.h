// The MPI backend (Open MPI) for fixed-size jobs started by mpirun: the world is
// MPI_COMM_WORLD, set once by mpirun. It cannot be rebuilt for another
// membership, so MpiCommunicatorFactory::Create refuses any membership but the
// one mpirun gave, with an error that says so.
#pragma once

#include <memory>

#include "collectives/communicator.h"

namespace elastic::collectives {

struct MpiOptions {
  Timeout default_timeout = std::chrono::seconds(60);
};

class MpiCommunicatorFactory : public CommunicatorFactory {
 public:
  explicit MpiCommunicatorFactory(MpiOptions options = {});

  // The membership of MPI_COMM_WORLD (generation 0), initialising MPI if needed.
  static Membership WorldMembership();

  // Returns the MPI_COMM_WORLD communicator. Throws UnsupportedOperation when
  // `membership` differs from WorldMembership() (a rebuild), or when a
  // communicator was already created and destroyed (MPI cannot re-initialise).
  std::unique_ptr<Communicator> Create(const Membership& membership) override;

 private:
  const MpiOptions options_;
};

}  // namespace elastic::collectives
