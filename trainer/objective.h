// What a task's model is trained and judged by: the loss it minimises and the
// one metric that is reported beside it (accuracy for a classifier, mean
// absolute error for a regression, ...).
//
// Everything an Objective measures is a sum over samples, so that batches,
// micro-batches and ranks add up exactly (an allreduce of sums, never of
// ratios): the metric printed is metric_sum / count.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace elastic::trainer {

// A model's evaluation over some samples, as sums (see the file comment).
struct EvalResult {
  explicit EvalResult(int64_t num_classes = 0)
      : class_correct(num_classes, 0), class_count(num_classes, 0) {}

  double loss_sum = 0;    // the objective's evaluation loss, summed over samples
  double metric_sum = 0;  // the objective's metric, summed over samples
  int64_t count = 0;
  std::vector<int64_t> class_correct;  // by true label; empty unless a classification
  std::vector<int64_t> class_count;

  double loss() const { return count > 0 ? loss_sum / static_cast<double>(count) : 0; }
  double metric() const { return count > 0 ? metric_sum / static_cast<double>(count) : 0; }
  // 0 for a class with no samples.
  double ClassAccuracy(int64_t label) const;

  // Adds another partial result of the same number of classes.
  void Merge(const EvalResult& other);
  // The sums as one vector of doubles (for one allreduce) and back.
  std::vector<double> ToSums() const;
  static EvalResult FromSums(const std::vector<double>& sums, int64_t num_classes);
};

class Objective {
 public:
  virtual ~Objective() = default;

  // What the metric is called in the progress lines and the report ("accuracy").
  virtual std::string metric_name() const = 0;
  // Whether the metric reads as a percentage (a fraction in [0, 1]).
  virtual bool metric_is_fraction() const = 0;
  // Whether a larger metric is better (accuracy) or a smaller one (an error).
  virtual bool higher_is_better() const = 0;
  // Classes for a per-class breakdown of the evaluation; 0: none.
  virtual int64_t num_classes() const { return 0; }

  // The training loss: the mean over the batch, float32, differentiable.
  // `output` is the model's forward (possibly under autocast).
  virtual torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& target) const = 0;
  // The metric summed over the batch's samples (no gradient is taken).
  virtual double MetricSum(const torch::Tensor& output, const torch::Tensor& target) const = 0;
  // Adds one evaluated batch to `result`: the evaluation loss (Loss without
  // training-only terms such as label smoothing) and the metric, summed.
  virtual void Evaluate(const torch::Tensor& output, const torch::Tensor& target,
                        EvalResult& result) const;
  // The evaluation loss summed over the batch. Defaults to Loss x batch size.
  virtual double EvalLossSum(const torch::Tensor& output, const torch::Tensor& target) const;
};

// Label-smoothed cross-entropy over `num_classes` logits; the metric is
// accuracy (arg-max equals the label), with a per-class breakdown.
class Classification : public Objective {
 public:
  explicit Classification(int64_t num_classes, double label_smoothing = 0);
  std::string metric_name() const override { return "accuracy"; }
  bool metric_is_fraction() const override { return true; }
  bool higher_is_better() const override { return true; }
  int64_t num_classes() const override { return num_classes_; }
  torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& target) const override;
  double MetricSum(const torch::Tensor& output, const torch::Tensor& target) const override;
  void Evaluate(const torch::Tensor& output, const torch::Tensor& target,
                EvalResult& result) const override;

 private:
  int64_t num_classes_;
  double label_smoothing_;
};

// Mean squared error against float targets of the output's shape; the metric
// is the mean absolute error.
class Regression : public Objective {
 public:
  std::string metric_name() const override { return "mean abs error"; }
  bool metric_is_fraction() const override { return false; }
  bool higher_is_better() const override { return false; }
  torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& target) const override;
  double MetricSum(const torch::Tensor& output, const torch::Tensor& target) const override;
};

// Next-token prediction: cross-entropy of [N, T, V] logits against the [N, T]
// next tokens, the mean over the N x T tokens. Every sample has T tokens, so
// the mean over samples of each sample's token mean (what the sums of
// objective.h add up to) is the mean over tokens. The metric is next-token
// accuracy; perplexity is exp of the loss.
class LanguageModel : public Objective {
 public:
  explicit LanguageModel(int64_t vocab_size);
  std::string metric_name() const override { return "token accuracy"; }
  bool metric_is_fraction() const override { return true; }
  bool higher_is_better() const override { return true; }
  int64_t vocab_size() const { return vocab_size_; }
  // Throws std::invalid_argument when `output` is not [N, T, vocab_size] or
  // `target` not [N, T].
  torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& target) const override;
  double MetricSum(const torch::Tensor& output, const torch::Tensor& target) const override;

 private:
  void CheckShapes(const torch::Tensor& output, const torch::Tensor& target) const;
  int64_t vocab_size_;
};

// Label-smoothed cross-entropy, mean over the batch, computed in float32.
torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                           double label_smoothing);

}  // namespace elastic::trainer
