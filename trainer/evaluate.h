// Evaluation: loss, accuracy and per-class accuracy of a model on a data set.
//
// The result holds raw sums, not ratios, so that partial results (one per
// worker, each over its shard of the test set) add up exactly with Merge()
// or an allreduce of the same numbers.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "models/net.h"
#include "trainer/data/loader.h"
#include "trainer/precision.h"

namespace elastic::trainer {

struct EvalResult {
  explicit EvalResult(int64_t num_classes = 0)
      : class_correct(num_classes, 0), class_count(num_classes, 0) {}

  double loss_sum = 0;  // plain cross-entropy (no label smoothing), summed over samples
  int64_t correct = 0;
  int64_t count = 0;
  std::vector<int64_t> class_correct;  // by true label
  std::vector<int64_t> class_count;

  double loss() const { return count > 0 ? loss_sum / static_cast<double>(count) : 0; }
  double accuracy() const {
    return count > 0 ? static_cast<double>(correct) / static_cast<double>(count) : 0;
  }
  // 0 for a class with no samples.
  double ClassAccuracy(int64_t label) const;

  // Adds the predictions of one batch.
  void Add(const torch::Tensor& logits, const torch::Tensor& labels);
  // Adds another partial result of the same number of classes.
  void Merge(const EvalResult& other);
};

// Runs the model in eval mode without gradients over every batch of
// `loader`'s pass over `indices` (autocast to `precision`).
EvalResult Evaluate(models::Net& model, Loader& loader, const std::vector<int64_t>& indices,
                    int64_t num_classes, const torch::Device& device, Precision precision);

}  // namespace elastic::trainer
