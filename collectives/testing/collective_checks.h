// Checks every operation of a Communicator against values computed locally.
// Every member runs the same calls; each member checks its own results and
// throws std::runtime_error naming the first wrong element.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/communicator.h"

namespace elastic::collectives::testing {

// Element i of member r's input: a small integer, exact in every DataType.
double InputValue(int rank, size_t i);

// Allreduce (sum, average), broadcast from the last member, allgather and
// barrier, for every type in `types` and element count in `counts`.
void CheckAllOps(Communicator& comm, const std::vector<DataType>& types,
                 const std::vector<size_t>& counts);

// Several async allreduces in flight at once, waited for in reverse order.
void CheckAsyncOverlap(Communicator& comm);

// 64 MiB float32 allreduce, broadcast and an allgather with 64 MiB output, and
// with `every_type` a 64 MiB allreduce (average) of every other type.
void CheckLarge(Communicator& comm, bool every_type);

std::vector<DataType> AllDataTypes();

}  // namespace elastic::collectives::testing
