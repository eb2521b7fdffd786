// One optimizer step of the elastic trainer over several ranks and several
// micro-batches per rank, equal to one step on all the step's samples.
//
// A step consumes N samples (--global-batch, or world x --batch-size), split
// over the ranks by the ElasticSampler. Each rank cuts its share into
// micro-batches of at most --batch-size samples and weights micro-batch i's
// mean loss by n_i / N; the gradients of its backward passes accumulate
// locally and are summed over the ranks once, during the last backward.
// Summed, the weighted gradients are the gradient of the mean loss over all N
// samples: exact for any split, uneven shares and short last steps included.
// (Batch-norm statistics are per micro-batch, as with any data parallelism.)
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/gradient_reducer.h"
#include "trainer/learner.h"

namespace elastic::trainer {

// Cuts one rank's share of a step (the first dimension of images and labels)
// into the fewest micro-batches of at most `max_batch` samples, their sizes
// differing by at most one, each weighted by its size / `step_samples`.
// Throws std::invalid_argument for an empty share or max_batch < 1.
std::vector<MicroBatch> SplitIntoMicroBatches(const torch::Tensor& images,
                                              const torch::Tensor& labels, int64_t max_batch,
                                              int64_t step_samples);

// The GradientHook of a data-parallel step: a GradientReducer that sums the
// (pre-weighted) gradients over the communicator's members, launching bucket
// allreduces while the last micro-batch's backward runs (DDP's no_sync for the
// earlier ones). A CollectiveError of the step comes out of Learner::Step.
class SummingGradientHook : public GradientHook {
 public:
  // `comm` must outlive the hook; `params` are the learner's parameters.
  SummingGradientHook(const std::vector<torch::Tensor>& params, collectives::Communicator& comm);

  void BeforeBackward(bool last) override;
  void AfterBackward(const std::vector<torch::Tensor>& params) override;

  // Seconds spent waiting for the sum after the last backward pass, since
  // the last call: the others' gradients and the transfer. A step's time less
  // this is the rank's own work (shares.h sizes shares by it).
  double TakeWaitedSeconds();

 private:
  collectives::GradientReducer reducer_;
  double waited_seconds_ = 0;
};

}  // namespace elastic::trainer
