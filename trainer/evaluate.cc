#include "trainer/evaluate.h"

#include <torch/nn/functional/loss.h>

#include <stdexcept>

#include "trainer/amp.h"

namespace elastic::trainer {

double EvalResult::ClassAccuracy(int64_t label) const {
  const int64_t n = class_count.at(label);
  return n > 0 ? static_cast<double>(class_correct.at(label)) / static_cast<double>(n) : 0;
}

void EvalResult::Add(const torch::Tensor& logits, const torch::Tensor& labels) {
  const int64_t num_classes = static_cast<int64_t>(class_count.size());
  if (logits.dim() != 2 || logits.size(1) != num_classes)
    throw std::invalid_argument("EvalResult::Add: logits do not have one column per class");
  const torch::Tensor float_logits = logits.to(torch::kFloat);
  const torch::Tensor labels_cpu = labels.to(torch::kCPU, torch::kLong);
  loss_sum += torch::nn::functional::cross_entropy(
                  float_logits, labels.to(logits.device()),
                  torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                  .item<double>();
  const torch::Tensor hits = float_logits.argmax(1).to(torch::kCPU).eq(labels_cpu);
  // Per-class sums with bincount: one pass, no loop over samples in C++.
  const torch::Tensor totals = torch::bincount(labels_cpu, {}, num_classes);
  const torch::Tensor right =
      torch::bincount(labels_cpu, hits.to(torch::kDouble), num_classes).round().to(torch::kLong);
  const auto totals_a = totals.accessor<int64_t, 1>();
  const auto right_a = right.accessor<int64_t, 1>();
  for (int64_t c = 0; c < num_classes; ++c) {
    class_count[c] += totals_a[c];
    class_correct[c] += right_a[c];
  }
  correct += hits.sum().item<int64_t>();
  count += labels.size(0);
}

void EvalResult::Merge(const EvalResult& other) {
  if (other.class_count.size() != class_count.size())
    throw std::invalid_argument("EvalResult::Merge: different numbers of classes");
  loss_sum += other.loss_sum;
  correct += other.correct;
  count += other.count;
  for (size_t c = 0; c < class_count.size(); ++c) {
    class_count[c] += other.class_count[c];
    class_correct[c] += other.class_correct[c];
  }
}

EvalResult Evaluate(models::Net& model, Loader& loader, const std::vector<int64_t>& indices,
                    int64_t num_classes, const torch::Device& device, Precision precision) {
  EvalResult result(num_classes);
  const bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;
  loader.Start(indices, /*epoch=*/0);
  while (std::optional<Batch> batch = loader.Next()) {
    torch::Tensor logits;
    {
      AutocastScope autocast(device, precision);
      logits = model.forward(batch->images.to(device));
    }
    result.Add(logits, batch->labels);
  }
  model.train(was_training);
  return result;
}

}  // namespace elastic::trainer
