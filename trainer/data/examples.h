// What a training loop reads its data from: samples by index, built into
// batches. Random access by index is what keeps the elastic sampler's promise
// (every sample exactly once per epoch, whatever the world does); how a batch
// is built (decoding, augmenting, normalising) is the data's own business.
//
// The image data sets (dataset.h) are one kind of Examples (ImageExamples);
// a user's tabular or regression data is another (TensorExamples, or a class
// of their own).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace elastic::trainer {

struct Batch {
  torch::Tensor inputs;          // what the model's forward takes, first dimension B
  torch::Tensor targets;         // what the objective compares the output with, first dimension B
  std::vector<int64_t> indices;  // the B samples, in order
};

// How a batch is to be built. The same request always gives the same batch:
// augmentation is a function of (seed, epoch, index), never of timing.
struct BatchRequest {
  uint64_t epoch = 0;
  bool augment = false;  // training: the data's random augmentation, if it has one
  uint64_t seed = 0;
  bool channels_last = false;  // 4-d inputs in channels-last memory
};

class Examples {
 public:
  virtual ~Examples() = default;
  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;
  // The batch of `indices` (each in [0, size()), checked by the caller).
  // Called from several loader threads at once: must not change the object.
  virtual Batch Get(const std::vector<int64_t>& indices, const BatchRequest& request) const = 0;
};

// Examples over two tensors in memory whose first dimension is the sample:
// a batch is rows of each, as they are (no augmentation).
class TensorExamples : public Examples {
 public:
  // Throws std::invalid_argument when the first dimensions differ or are empty.
  TensorExamples(std::string name, torch::Tensor inputs, torch::Tensor targets);
  std::string name() const override { return name_; }
  int64_t size() const override { return inputs_.size(0); }
  Batch Get(const std::vector<int64_t>& indices, const BatchRequest& request) const override;

 private:
  std::string name_;
  torch::Tensor inputs_;
  torch::Tensor targets_;
};

}  // namespace elastic::trainer
