#include "collectives/communicator.h"

#include <stdexcept>

namespace elastic::collectives {

Communicator::Communicator(const Membership& membership, Timeout default_timeout)
    : membership_(membership), default_timeout_(default_timeout) {
  if (membership.size < 1 || membership.rank < 0 || membership.rank >= membership.size) {
    throw std::invalid_argument("invalid membership: rank " + std::to_string(membership.rank) +
                                " of size " + std::to_string(membership.size));
  }
  if (default_timeout <= Timeout::zero()) {
    throw std::invalid_argument("the default timeout must be positive");
  }
}

Timeout Communicator::Resolve(Timeout timeout) const {
  if (timeout < Timeout::zero()) throw std::invalid_argument("negative operation timeout");
  return timeout == kDefaultTimeout ? default_timeout_ : timeout;
}

std::shared_ptr<Work> Communicator::AllreduceAsync(void* data, size_t count, DataType type,
                                                   ReduceOp op, Timeout timeout) {
  if (data == nullptr && count > 0) throw std::invalid_argument("allreduce: null buffer");
  return DoAllreduce(data, count, type, op, Resolve(timeout));
}

std::shared_ptr<Work> Communicator::BroadcastAsync(void* data, size_t count, DataType type,
                                                   int root, Timeout timeout) {
  if (data == nullptr && count > 0) throw std::invalid_argument("broadcast: null buffer");
  if (root < 0 || root >= size()) {
    throw std::invalid_argument("broadcast: root " + std::to_string(root) +
                                " is not a member of a world of size " + std::to_string(size()));
  }
  return DoBroadcast(data, count, type, root, Resolve(timeout));
}

std::shared_ptr<Work> Communicator::AllgatherAsync(const void* input, void* output, size_t count,
                                                   DataType type, Timeout timeout) {
  if ((input == nullptr || output == nullptr) && count > 0) {
    throw std::invalid_argument("allgather: null buffer");
  }
  return DoAllgather(input, output, count, type, Resolve(timeout));
}

std::shared_ptr<Work> Communicator::BarrierAsync(Timeout timeout) {
  return DoBarrier(Resolve(timeout));
}

void Communicator::Allreduce(void* data, size_t count, DataType type, ReduceOp op,
                             Timeout timeout) {
  AllreduceAsync(data, count, type, op, timeout)->Wait();
}

void Communicator::Broadcast(void* data, size_t count, DataType type, int root, Timeout timeout) {
  BroadcastAsync(data, count, type, root, timeout)->Wait();
}

void Communicator::Allgather(const void* input, void* output, size_t count, DataType type,
                             Timeout timeout) {
  AllgatherAsync(input, output, count, type, timeout)->Wait();
}

void Communicator::Barrier(Timeout timeout) { BarrierAsync(timeout)->Wait(); }

}  // namespace elastic::collectives
