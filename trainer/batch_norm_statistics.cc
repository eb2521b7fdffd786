#include "trainer/batch_norm_statistics.h"

#include <torch/torch.h>

#include <optional>

#include "collectives/tensor_ops.h"
#include "trainer/amp.h"

namespace elastic::trainer {
namespace {

// One batch norm's running statistics, and what the re-estimate must put back.
struct Norm {
  torch::nn::BatchNormOptions* options;
  torch::Tensor mean, var, batches;  // the module's buffers, changed in place
  c10::optional<double> momentum;    // its own, restored afterwards
  torch::Tensor saved_batches;       // num_batches_tracked counts training steps
};

template <typename Impl>
void AddNorms(models::Net& model, std::vector<Norm>& norms) {
  for (const std::shared_ptr<torch::nn::Module>& module : model.modules(/*include_self=*/false)) {
    Impl* bn = module->as<Impl>();
    if (bn == nullptr || !bn->running_mean.defined()) continue;
    norms.push_back({&bn->options, bn->running_mean, bn->running_var, bn->num_batches_tracked,
                     bn->options.momentum(), bn->num_batches_tracked.clone()});
  }
}

std::vector<Norm> FindNorms(models::Net& model) {
  std::vector<Norm> norms;
  AddNorms<torch::nn::BatchNorm1dImpl>(model, norms);
  AddNorms<torch::nn::BatchNorm2dImpl>(model, norms);
  AddNorms<torch::nn::BatchNorm3dImpl>(model, norms);
  return norms;
}

// Train-mode forwards with a cumulative average (momentum None: ATen's
// running_x += (batch_x - running_x) / num_batches_tracked) from zero.
int64_t AverageLocalBatches(models::Net& model, std::vector<Norm>& norms, Loader& loader,
                            const std::vector<int64_t>& indices, const torch::Device& device,
                            Precision precision) {
  for (Norm& n : norms) {
    n.options->momentum(c10::nullopt);
    n.mean.zero_();
    n.var.zero_();
    n.batches.zero_();
  }
  int64_t batches = 0;
  if (!indices.empty()) {
    const bool was_training = model.is_training();
    model.train();
    torch::NoGradGuard no_grad;
    loader.Start(indices, /*epoch=*/0);
    while (std::optional<Batch> batch = loader.Next()) {
      AutocastScope autocast(device, precision);
      model.forward(InWeightType(batch->inputs.to(device), precision));
      ++batches;
    }
    model.train(was_training);
  }
  for (Norm& n : norms) {
    n.options->momentum(n.momentum);
    n.batches.copy_(n.saved_batches);
  }
  return batches;
}

}  // namespace

int64_t RecomputeBatchNormStatistics(models::Net& model, Loader& loader,
                                     const std::vector<int64_t>& indices,
                                     const torch::Device& device, Precision precision,
                                     collectives::Communicator* comm) {
  std::vector<Norm> norms = FindNorms(model);
  if (norms.empty()) return 0;
  std::vector<torch::Tensor> saved;
  for (const Norm& n : norms) saved.push_back(torch::cat({n.mean, n.var}).clone());
  const int64_t local = AverageLocalBatches(model, norms, loader, indices, device, precision);

  // Every rank's averages weighted by its batches, summed in float64.
  std::vector<torch::Tensor> parts;
  for (const Norm& n : norms) parts.push_back(torch::cat({n.mean, n.var}).to(torch::kFloat64));
  torch::Tensor sums = torch::cat(parts).mul_(static_cast<double>(local));
  sums = torch::cat({sums, torch::full({1}, static_cast<double>(local), sums.options())});
  if (comm != nullptr && comm->size() > 1)
    collectives::Allreduce(*comm, sums, collectives::ReduceOp::kSum);
  const double total = sums[-1].item<double>();
  int64_t offset = 0;
  for (size_t i = 0; i < norms.size(); ++i) {
    Norm& n = norms[i];
    const int64_t c = n.mean.numel();
    if (total == 0) {  // no rank had a sample: keep the running averages
      n.mean.copy_(saved[i].slice(0, 0, c));
      n.var.copy_(saved[i].slice(0, c, 2 * c));
      continue;
    }
    n.mean.copy_(sums.slice(0, offset, offset + c) / total);
    n.var.copy_(sums.slice(0, offset + c, offset + 2 * c) / total);
    offset += 2 * c;
  }
  return static_cast<int64_t>(total);
}

}  // namespace elastic::trainer
