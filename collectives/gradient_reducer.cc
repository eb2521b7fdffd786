#include "collectives/gradient_reducer.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "collectives/tensor_ops.h"

namespace elastic::collectives {

GradientReducer::GradientReducer(std::vector<at::Tensor> parameters, Communicator* comm,
                                 GradientReducerOptions options)
    : parameters_(std::move(parameters)), comm_(comm), options_(options) {
  if (comm_ == nullptr) throw std::invalid_argument("GradientReducer: null communicator");
  if (options_.bucket_bytes == 0) throw std::invalid_argument("GradientReducer: bucket_bytes 0");
  // Reverse order: the last layers' gradients are computed first in backward.
  std::vector<std::vector<size_t>> groups;
  size_t group_bytes = 0;
  at::Tensor previous;
  for (size_t i = parameters_.size(); i-- > 0;) {
    const at::Tensor& p = parameters_[i];
    if (!p.requires_grad()) continue;
    const size_t bytes = static_cast<size_t>(p.numel()) * p.element_size();
    const bool compatible = previous.defined() && previous.scalar_type() == p.scalar_type() &&
                            previous.device() == p.device();
    if (groups.empty() || !compatible || group_bytes + bytes > options_.bucket_bytes) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(i);
    group_bytes += bytes;
    previous = p;
  }
  torch::NoGradGuard no_grad;
  for (const auto& group : groups) {
    int64_t numel = 0;
    for (size_t i : group) numel += parameters_[i].numel();
    Bucket bucket;
    bucket.buffer =
        torch::zeros({numel}, parameters_[group.front()].options().requires_grad(false));
    int64_t offset = 0;
    for (size_t i : group) {
      const at::Tensor& p = parameters_[i];
      bucket.slots.push_back(slots_.size());
      slots_.push_back(
          Slot{i, buckets_.size(), bucket.buffer.narrow(0, offset, p.numel()).view(p.sizes())});
      offset += p.numel();
    }
    bucket.pending = bucket.slots.size();
    buckets_.push_back(std::move(bucket));
  }
  filled_.assign(slots_.size(), false);
  counted_.assign(slots_.size(), false);
  for (size_t s = 0; s < slots_.size(); ++s) {
    hook_handles_.push_back(parameters_[slots_[s].parameter].register_hook(
        [this, s](const at::Tensor& grad) { OnGradient(s, grad); }));
  }
}

GradientReducer::~GradientReducer() {
  for (size_t s = 0; s < slots_.size(); ++s) {
    parameters_[slots_[s].parameter].remove_hook(hook_handles_[s]);
  }
  // Buffers of allreduces still in flight must outlive them: wait, ignoring errors.
  for (auto& bucket : buckets_) {
    if (!bucket.work) continue;
    try {
      bucket.work->Wait();
    } catch (const std::exception&) {
    }
  }
}

void GradientReducer::SetCommunicator(Communicator* comm) {
  if (comm == nullptr) throw std::invalid_argument("GradientReducer: null communicator");
  std::lock_guard<std::mutex> lock(mutex_);
  comm_ = comm;
  ResetStepLocked();
}

void GradientReducer::SetSync(bool sync) {
  std::lock_guard<std::mutex> lock(mutex_);
  sync_ = sync;
}

void GradientReducer::Prepare() {
  std::lock_guard<std::mutex> lock(mutex_);
  ResetStepLocked();
}

void GradientReducer::ResetStepLocked() {
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.slots.size();
    bucket.work.reset();
  }
  filled_.assign(slots_.size(), false);
  counted_.assign(slots_.size(), false);
  next_launch_ = 0;
}

void GradientReducer::OnGradient(size_t s, const at::Tensor& grad) {
  if (!grad.defined()) return;  // no gradient after all: Finish() contributes zeros
  std::lock_guard<std::mutex> lock(mutex_);
  const Slot& slot = slots_[s];
  Bucket& bucket = buckets_[slot.bucket];
  if (bucket.work) {
    throw std::logic_error("GradientReducer: gradient of parameter " +
                           std::to_string(slot.parameter) +
                           " arrived after its bucket was sent; call Finish() after each backward");
  }
  if (grad.layout() != c10::kStrided) {
    throw std::invalid_argument("GradientReducer: sparse gradients are not supported (parameter " +
                                std::to_string(slot.parameter) + ")");
  }
  torch::NoGradGuard no_grad;
  if (filled_[s]) {
    slot.view.add_(grad);  // another backward of this step: accumulate, like .grad does
  } else {
    slot.view.copy_(grad);
    filled_[s] = true;
  }
  // Only a synchronising backward makes the bucket ready; earlier ones (no_sync)
  // only accumulate.
  if (!sync_ || counted_[s]) return;
  counted_[s] = true;
  --bucket.pending;
  LaunchReadyLocked();
}

void GradientReducer::LaunchReadyLocked() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_launch_];
    bucket.work = AllreduceAsync(*comm_, bucket.buffer, options_.op, options_.timeout);
    ++next_launch_;
  }
}

void GradientReducer::Finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  {
    torch::NoGradGuard no_grad;
    // Parameters that got no gradient on this member contribute zeros.
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (!filled_[s]) slots_[s].view.zero_();
      filled_[s] = true;
      if (counted_[s]) continue;
      counted_[s] = true;
      --buckets_[slots_[s].bucket].pending;
    }
  }
  LaunchReadyLocked();
  try {
    for (auto& bucket : buckets_) bucket.work->Wait();
  } catch (...) {
    ResetStepLocked();
    throw;
  }
  torch::NoGradGuard no_grad;
  for (const Slot& slot : slots_) {
    at::Tensor& param = parameters_[slot.parameter];
    if (param.grad().defined()) {
      param.mutable_grad().copy_(slot.view);
    } else {
      param.mutable_grad() = slot.view.clone();
    }
  }
  ResetStepLocked();
}

std::vector<std::vector<size_t>> GradientReducer::BucketLayout() const {
  std::vector<std::vector<size_t>> layout;
  for (const auto& bucket : buckets_) {
    layout.emplace_back();
    for (size_t s : bucket.slots) layout.back().push_back(slots_[s].parameter);
  }
  return layout;
}

size_t GradientReducer::buckets_launched() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_launch_;
}

}  // namespace elastic::collectives
