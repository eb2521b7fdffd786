// The elastic sampler: which samples each rank trains on, step by step, in a
// world whose size may change in the middle of an epoch.
//
// An epoch is one permutation of the data set, a function of (seed, epoch)
// only. Progress through it is a single number, the position: how many samples
// of the permutation the job has consumed. An optimizer step consumes the next
// S samples (S = W*B for W ranks of per-rank batch B, or S = --global-batch
// whatever W is), split into W contiguous slices, evenly (sizes differing by
// at most one) or by the ranks' speeds (shares.h); rank r takes the r-th. Because the state is only
// (epoch, position), a new world restored from a commit continues exactly where the commit left off
// and every sample of the epoch is used exactly once, whatever joins, leaves or fails in between.
#pragma once

#include <cstdint>
#include <vector>

namespace elastic::trainer {

class ElasticSampler {
 public:
  // dataset_size > 0; the permutation of each epoch is derived from seed.
  ElasticSampler(int64_t dataset_size, uint64_t seed);

  // The order of all samples in an epoch (deterministic, platform-independent).
  std::vector<int64_t> Permutation(uint64_t epoch) const;

  // The indices rank `rank` of `world` trains on in the step that starts at
  // `position` and consumes `step_samples` samples (fewer at the end of the
  // epoch): the rank's slice of Share(samples, rank, world).
  std::vector<int64_t> StepIndices(const std::vector<int64_t>& permutation, int64_t position,
                                   int rank, int world, int64_t step_samples) const;

  // The same when a full step is split as `shares` (a rank each, summing to
  // the step's samples; shares.h sizes them by speed): rank r's slice starts
  // after the shares of ranks 0..r-1. A shorter last step is apportioned in
  // proportion to the shares (evenly, as above, when they are even).
  std::vector<int64_t> StepIndices(const std::vector<int64_t>& permutation, int64_t position,
                                   int rank, const std::vector<int64_t>& shares) const;

  // The position after that step.
  int64_t NextPosition(int64_t position, int64_t step_samples) const;

  // Steps left in the epoch from `position`.
  int64_t StepsLeft(int64_t position, int64_t step_samples) const;

  // How many of `samples` rank `rank` of `world` takes: the first
  // samples % world ranks one more than the others (some none when samples < world).
  static int64_t Share(int64_t samples, int rank, int world);

  int64_t dataset_size() const { return dataset_size_; }

 private:
  int64_t dataset_size_;
  uint64_t seed_;
};

}  // namespace elastic::trainer
