// Averages gradients across the members of a Communicator while backward runs.
//
// Parameters that require grad are packed, in reverse order (the order autograd
// produces their gradients), into buckets of at most `bucket_bytes` (one dtype
// and device per bucket). An autograd hook copies each gradient into its slot
// as soon as it is computed; when a bucket is full its asynchronous allreduce
// (average) starts, so communication overlaps the rest of backward. Buckets are
// launched strictly in order so that every member issues the same collectives
// in the same order, whatever order its hooks fire in.
//
// One training step:
//   reducer.Prepare();      // optional: forgets a step abandoned halfway
//   loss.backward();        // hooks fill buckets and launch their allreduces
//   reducer.Finish();       // waits, writes the averaged gradients to param.grad()
//   optimizer.step();
//
// Gradient accumulation (DDP's no_sync): with SetSync(false), a backward only
// adds its gradients into the buckets; the next backward with SetSync(true)
// adds its own and launches the allreduces, so a step of k micro-batches
// communicates once:
//   reducer.SetSync(false);  loss_1.backward(); ... loss_{k-1}.backward();
//   reducer.SetSync(true);   loss_k.backward();
//   reducer.Finish();
//
// Finish() sets every parameter's grad to the average (or, with `op` kSum, the
// sum) over members of the gradient this step's backward passes produced (so call zero_grad() or
// set grads to undefined between steps, as with DDP). A parameter that received no gradient on a
// member contributes zeros there, and after Finish() every parameter that requires grad has a
// defined grad. Parameters that do not require grad are left alone.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/communicator.h"

namespace elastic::collectives {

struct GradientReducerOptions {
  size_t bucket_bytes = 25u << 20;
  Timeout timeout = kDefaultTimeout;  // of each bucket's allreduce
  // kSum when each member already weighted its loss by its share of the step
  // (members with unequal sample counts); kAverage for equal shares.
  ReduceOp op = ReduceOp::kAverage;
};

class GradientReducer {
 public:
  // `comm` must outlive the reducer or be replaced with SetCommunicator first.
  GradientReducer(std::vector<at::Tensor> parameters, Communicator* comm,
                  GradientReducerOptions options = {});
  ~GradientReducer();  // removes the hooks
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // After a rebuild: use `comm` from the next step on (and forget this step).
  void SetCommunicator(Communicator* comm);

  // Forgets a partially reduced step (e.g. after a failed Finish). Outstanding
  // allreduces of the old step must have failed or completed (abort the old
  // communicator first).
  void Prepare();

  // Whether the following backward passes launch the allreduces (the default)
  // or only accumulate into the buckets. Takes effect at the next gradient.
  void SetSync(bool sync);

  // Launches what backward did not, waits for every bucket, and writes the
  // averaged gradients into the parameters' grad. Throws the CollectiveError of
  // a failed bucket (the step is then forgotten).
  void Finish();

  size_t bucket_count() const { return buckets_.size(); }
  // Parameter indices (into the constructor's list) of each bucket, in launch order.
  std::vector<std::vector<size_t>> BucketLayout() const;
  // Buckets whose allreduce has started in the current step.
  size_t buckets_launched() const;

 private:
  struct Slot {
    size_t parameter;  // index into parameters_
    size_t bucket;
    at::Tensor view;  // of the bucket's flat buffer, shaped like the parameter
  };
  struct Bucket {
    at::Tensor buffer;  // flat, contiguous
    std::vector<size_t> slots;
    size_t pending = 0;  // slots still waiting for a gradient of a synchronising backward
    std::shared_ptr<Work> work;
  };

  void OnGradient(size_t slot, const at::Tensor& grad);
  void LaunchReadyLocked();
  void ResetStepLocked();

  std::vector<at::Tensor> parameters_;
  Communicator* comm_;
  const GradientReducerOptions options_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<bool> filled_;   // per slot: holds a gradient of this step
  std::vector<bool> counted_;  // per slot: counted off its bucket's pending
  bool sync_ = true;
  std::vector<unsigned> hook_handles_;  // per slot
  size_t next_launch_ = 0;
  mutable std::mutex mutex_;
};

}  // namespace elastic::collectives
