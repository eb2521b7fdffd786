// The thin LibTorch adapter: collectives on tensors, mapped onto the raw-buffer
// Communicator. Tensors must be dense and contiguous. NCCL works on CUDA
// tensors in place; for a CUDA tensor on a host backend (Gloo, MPI) the
// operation runs on a host copy, and the result reaches the tensor when the
// Work is waited for. A returned Work keeps its tensors alive until it is
// destroyed.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "collectives/communicator.h"

namespace elastic::collectives {

// Throws std::invalid_argument for a scalar type no backend reduces.
DataType ToDataType(c10::ScalarType type);

std::shared_ptr<Work> AllreduceAsync(Communicator& comm, const at::Tensor& tensor, ReduceOp op,
                                     Timeout timeout = kDefaultTimeout);
std::shared_ptr<Work> BroadcastAsync(Communicator& comm, const at::Tensor& tensor, int root,
                                     Timeout timeout = kDefaultTimeout);

void Allreduce(Communicator& comm, const at::Tensor& tensor, ReduceOp op,
               Timeout timeout = kDefaultTimeout);
void Broadcast(Communicator& comm, const at::Tensor& tensor, int root,
               Timeout timeout = kDefaultTimeout);
// Returns a tensor of shape [size(), ...tensor.shape] holding every member's tensor.
at::Tensor Allgather(Communicator& comm, const at::Tensor& tensor,
                     Timeout timeout = kDefaultTimeout);

}  // namespace elastic::collectives
