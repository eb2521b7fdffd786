#include "trainer/data/examples.h"

#include <torch/torch.h>

#include <stdexcept>
#include <utility>

namespace elastic::trainer {

TensorExamples::TensorExamples(std::string name, torch::Tensor inputs, torch::Tensor targets)
    : name_(std::move(name)), inputs_(inputs.contiguous()), targets_(targets.contiguous()) {
  if (inputs_.dim() < 1 || targets_.dim() < 1 || inputs_.size(0) == 0) {
    throw std::invalid_argument(name_ + ": no samples (inputs and targets need a first dimension)");
  }
  if (inputs_.size(0) != targets_.size(0)) {
    throw std::invalid_argument(name_ + ": " + std::to_string(inputs_.size(0)) + " inputs but " +
                                std::to_string(targets_.size(0)) + " targets");
  }
}

Batch TensorExamples::Get(const std::vector<int64_t>& indices, const BatchRequest& request) const {
  const torch::Tensor rows = torch::from_blob(
      const_cast<int64_t*>(indices.data()), {static_cast<int64_t>(indices.size())}, torch::kInt64);
  Batch batch;
  batch.inputs = inputs_.index_select(0, rows);
  if (request.channels_last && batch.inputs.dim() == 4)
    batch.inputs = batch.inputs.contiguous(torch::MemoryFormat::ChannelsLast);
  batch.targets = targets_.index_select(0, rows);
  batch.indices = indices;
  return batch;
}

}  // namespace elastic::trainer
