#include "trainer/objective.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

namespace elastic::trainer {
namespace {

// Losses are computed in float32 at least: autocast's bf16/fp16 outputs are
// widened, fp64's are kept.
torch::Tensor Widened(const torch::Tensor& t) {
  return t.to(at::promote_types(t.scalar_type(), torch::kFloat));
}

}  // namespace

double EvalResult::ClassAccuracy(int64_t label) const {
  const int64_t n = class_count.at(label);
  return n > 0 ? static_cast<double>(class_correct.at(label)) / static_cast<double>(n) : 0;
}

void EvalResult::Merge(const EvalResult& other) {
  if (other.class_count.size() != class_count.size())
    throw std::invalid_argument("EvalResult::Merge: different numbers of classes");
  loss_sum += other.loss_sum;
  metric_sum += other.metric_sum;
  count += other.count;
  for (size_t c = 0; c < class_count.size(); ++c) {
    class_count[c] += other.class_count[c];
    class_correct[c] += other.class_correct[c];
  }
}

std::vector<double> EvalResult::ToSums() const {
  std::vector<double> sums = {loss_sum, metric_sum, static_cast<double>(count)};
  for (size_t c = 0; c < class_count.size(); ++c) {
    sums.push_back(static_cast<double>(class_correct[c]));
    sums.push_back(static_cast<double>(class_count[c]));
  }
  return sums;
}

EvalResult EvalResult::FromSums(const std::vector<double>& sums, int64_t num_classes) {
  if (sums.size() != static_cast<size_t>(3 + 2 * num_classes))
    throw std::invalid_argument("EvalResult::FromSums: not the sums of " +
                                std::to_string(num_classes) + " classes");
  EvalResult result(num_classes);
  result.loss_sum = sums[0];
  result.metric_sum = sums[1];
  result.count = static_cast<int64_t>(sums[2]);
  for (int64_t c = 0; c < num_classes; ++c) {
    result.class_correct[c] = static_cast<int64_t>(sums[3 + 2 * c]);
    result.class_count[c] = static_cast<int64_t>(sums[4 + 2 * c]);
  }
  return result;
}

double Objective::EvalLossSum(const torch::Tensor& output, const torch::Tensor& target) const {
  return Loss(output, target).item<double>() * static_cast<double>(output.size(0));
}

void Objective::Evaluate(const torch::Tensor& output, const torch::Tensor& target,
                         EvalResult& result) const {
  result.loss_sum += EvalLossSum(output, target);
  result.metric_sum += MetricSum(output, target);
  result.count += output.size(0);
}

torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                           double label_smoothing) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(Widened(logits), labels,
                          F::CrossEntropyFuncOptions().label_smoothing(label_smoothing));
}

Classification::Classification(int64_t num_classes, double label_smoothing)
    : num_classes_(num_classes), label_smoothing_(label_smoothing) {
  if (num_classes < 1) throw std::invalid_argument("Classification: needs at least one class");
}

torch::Tensor Classification::Loss(const torch::Tensor& output, const torch::Tensor& target) const {
  return CrossEntropy(output, target, label_smoothing_);
}

double Classification::MetricSum(const torch::Tensor& output, const torch::Tensor& target) const {
  return static_cast<double>(output.argmax(1).eq(target).sum().item<int64_t>());
}

void Classification::Evaluate(const torch::Tensor& output, const torch::Tensor& target,
                              EvalResult& result) const {
  if (output.dim() != 2 || output.size(1) != num_classes_)
    throw std::invalid_argument("Classification: the output has not one column per class");
  if (result.class_count.size() != static_cast<size_t>(num_classes_))
    throw std::invalid_argument("Classification: the result is not of this many classes");
  const torch::Tensor logits = Widened(output);
  const torch::Tensor labels_cpu = target.to(torch::kCPU, torch::kLong);
  result.loss_sum += torch::nn::functional::cross_entropy(
                         logits, target.to(logits.device()),
                         torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                         .item<double>();
  const torch::Tensor hits = logits.argmax(1).to(torch::kCPU).eq(labels_cpu);
  // Per-class sums with bincount: one pass, no loop over samples in C++.
  const torch::Tensor totals = torch::bincount(labels_cpu, {}, num_classes_);
  const torch::Tensor right =
      torch::bincount(labels_cpu, hits.to(torch::kDouble), num_classes_).round().to(torch::kLong);
  const auto totals_a = totals.accessor<int64_t, 1>();
  const auto right_a = right.accessor<int64_t, 1>();
  for (int64_t c = 0; c < num_classes_; ++c) {
    result.class_count[c] += totals_a[c];
    result.class_correct[c] += right_a[c];
  }
  result.metric_sum += static_cast<double>(hits.sum().item<int64_t>());
  result.count += target.size(0);
}

torch::Tensor Regression::Loss(const torch::Tensor& output, const torch::Tensor& target) const {
  const torch::Tensor widened = Widened(output);
  return torch::mse_loss(widened, target.to(widened.scalar_type()).view_as(output));
}

double Regression::MetricSum(const torch::Tensor& output, const torch::Tensor& target) const {
  const torch::Tensor widened = Widened(output);
  return (widened - target.to(widened.scalar_type()).view_as(output)).abs().sum().item<double>() /
         static_cast<double>(output.numel() / std::max<int64_t>(1, output.size(0)));
}

LanguageModel::LanguageModel(int64_t vocab_size) : vocab_size_(vocab_size) {
  if (vocab_size < 2) throw std::invalid_argument("LanguageModel: needs at least two tokens");
}

void LanguageModel::CheckShapes(const torch::Tensor& output, const torch::Tensor& target) const {
  if (output.dim() != 3 || output.size(2) != vocab_size_ || target.dim() != 2 ||
      output.size(0) != target.size(0) || output.size(1) != target.size(1)) {
    throw std::invalid_argument("LanguageModel: expected logits [N, T, " +
                                std::to_string(vocab_size_) + "] and next tokens [N, T], got " +
                                c10::str(output.sizes()) + " and " + c10::str(target.sizes()));
  }
}

torch::Tensor LanguageModel::Loss(const torch::Tensor& output, const torch::Tensor& target) const {
  CheckShapes(output, target);
  return torch::nn::functional::cross_entropy(Widened(output).reshape({-1, vocab_size_}),
                                              target.reshape({-1}).to(output.device()));
}

double LanguageModel::MetricSum(const torch::Tensor& output, const torch::Tensor& target) const {
  CheckShapes(output, target);
  // Each sample's fraction of right next tokens, summed over samples.
  const torch::Tensor hits = output.argmax(2).eq(target.to(output.device()));
  return hits.to(torch::kDouble).mean(1).sum().item<double>();
}

}  // namespace elastic::trainer
