#include "trainer/evaluate.h"

#include <torch/torch.h>

#include <optional>

#include "trainer/amp.h"

namespace elastic::trainer {

EvalResult Evaluate(models::Net& model, Loader& loader, const std::vector<int64_t>& indices,
                    const Objective& objective, const torch::Device& device, Precision precision) {
  EvalResult result(objective.num_classes());
  const bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;
  loader.Start(indices, /*epoch=*/0);
  while (std::optional<Batch> batch = loader.Next()) {
    torch::Tensor output;
    {
      AutocastScope autocast(device, precision);
      output = model.forward(InWeightType(batch->inputs.to(device), precision));
    }
    objective.Evaluate(output, batch->targets.to(device), result);
  }
  model.train(was_training);
  return result;
}

}  // namespace elastic::trainer
