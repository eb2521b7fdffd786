#include "collectives/tensor_ops.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace elastic::collectives {
namespace {

// Holds the tensors an operation reads or writes until the caller drops the Work.
class TensorWork : public Work {
 public:
  TensorWork(std::shared_ptr<Work> inner, std::vector<at::Tensor> tensors)
      : inner_(std::move(inner)), tensors_(std::move(tensors)) {}
  bool IsCompleted() override { return inner_->IsCompleted(); }
  void Wait() override { inner_->Wait(); }

 private:
  std::shared_ptr<Work> inner_;
  std::vector<at::Tensor> tensors_;
};

// A GPU tensor on a host-memory backend (Gloo, MPI) goes through a host copy:
// the operation runs on the copy and Wait() copies the result back.
class StagedWork : public Work {
 public:
  StagedWork(std::shared_ptr<Work> inner, at::Tensor device, at::Tensor host)
      : inner_(std::move(inner)), device_(std::move(device)), host_(std::move(host)) {}
  bool IsCompleted() override { return inner_->IsCompleted(); }
  void Wait() override {
    inner_->Wait();
    if (!copied_back_) device_.copy_(host_);
    copied_back_ = true;
  }

 private:
  std::shared_ptr<Work> inner_;
  at::Tensor device_;
  at::Tensor host_;
  bool copied_back_ = false;
};

bool NeedsStaging(const Communicator& comm, const at::Tensor& tensor) {
  return !tensor.is_cpu() && !comm.reduces_device_memory();
}

void CheckDense(const at::Tensor& tensor, const char* op) {
  if (!tensor.defined()) throw std::invalid_argument(std::string(op) + ": undefined tensor");
  if (tensor.layout() != c10::kStrided) {
    throw std::invalid_argument(std::string(op) + ": only dense tensors are supported");
  }
  if (!tensor.is_contiguous()) {
    throw std::invalid_argument(std::string(op) + ": tensor must be contiguous");
  }
}

}  // namespace

DataType ToDataType(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return DataType::kFloat32;
    case c10::ScalarType::Half:
      return DataType::kFloat16;
    case c10::ScalarType::BFloat16:
      return DataType::kBFloat16;
    case c10::ScalarType::Double:
      return DataType::kFloat64;
    case c10::ScalarType::Long:
      return DataType::kInt64;
    default:
      throw std::invalid_argument(std::string("collectives: unsupported tensor type ") +
                                  c10::toString(type));
  }
}

std::shared_ptr<Work> AllreduceAsync(Communicator& comm, const at::Tensor& tensor, ReduceOp op,
                                     Timeout timeout) {
  CheckDense(tensor, "allreduce");
  if (NeedsStaging(comm, tensor)) {
    at::Tensor host = tensor.cpu();
    return std::make_shared<StagedWork>(AllreduceAsync(comm, host, op, timeout), tensor, host);
  }
  auto work = comm.AllreduceAsync(tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                                  ToDataType(tensor.scalar_type()), op, timeout);
  return std::make_shared<TensorWork>(std::move(work), std::vector<at::Tensor>{tensor});
}

std::shared_ptr<Work> BroadcastAsync(Communicator& comm, const at::Tensor& tensor, int root,
                                     Timeout timeout) {
  CheckDense(tensor, "broadcast");
  if (NeedsStaging(comm, tensor)) {
    at::Tensor host = tensor.cpu();
    return std::make_shared<StagedWork>(BroadcastAsync(comm, host, root, timeout), tensor, host);
  }
  auto work = comm.BroadcastAsync(tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                                  ToDataType(tensor.scalar_type()), root, timeout);
  return std::make_shared<TensorWork>(std::move(work), std::vector<at::Tensor>{tensor});
}

void Allreduce(Communicator& comm, const at::Tensor& tensor, ReduceOp op, Timeout timeout) {
  AllreduceAsync(comm, tensor, op, timeout)->Wait();
}

void Broadcast(Communicator& comm, const at::Tensor& tensor, int root, Timeout timeout) {
  BroadcastAsync(comm, tensor, root, timeout)->Wait();
}

at::Tensor Allgather(Communicator& comm, const at::Tensor& tensor, Timeout timeout) {
  CheckDense(tensor, "allgather");
  if (NeedsStaging(comm, tensor)) return Allgather(comm, tensor.cpu(), timeout).to(tensor.device());
  std::vector<int64_t> shape = {comm.size()};
  for (int64_t d : tensor.sizes()) shape.push_back(d);
  at::Tensor output = at::empty(shape, tensor.options());
  comm.Allgather(tensor.data_ptr(), output.data_ptr(), static_cast<size_t>(tensor.numel()),
                 ToDataType(tensor.scalar_type()), timeout);
  return output;
}

}  // namespace elastic::collectives
