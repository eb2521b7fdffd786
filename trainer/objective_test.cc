// Objectives and TensorExamples: what the loop sums, and what a user's
// tensors become as batches.
#include "trainer/objective.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

#include "trainer/data/examples.h"

namespace elastic::trainer {
namespace {

TEST(ObjectiveTest, ClassificationCountsHitsAndClasses) {
  Classification objective(3);
  const torch::Tensor logits = torch::tensor({{2.0, 0.0, 0.0}, {0.0, 2.0, 0.0}, {0.0, 0.0, 2.0}});
  const torch::Tensor labels = torch::tensor({0, 2, 2}, torch::kLong);
  EXPECT_EQ(objective.MetricSum(logits, labels), 2);
  EvalResult result(3);
  objective.Evaluate(logits, labels, result);
  EXPECT_EQ(result.count, 3);
  EXPECT_DOUBLE_EQ(result.metric(), 2.0 / 3);
  EXPECT_EQ(result.class_correct, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(result.class_count, (std::vector<int64_t>{1, 0, 2}));
  EXPECT_NEAR(result.loss_sum, CrossEntropy(logits, labels, 0).item<double>() * 3, 1e-5);
  EXPECT_THROW(objective.Evaluate(torch::zeros({2, 4}), labels.narrow(0, 0, 2), result),
               std::invalid_argument);
}

TEST(ObjectiveTest, RegressionIsMeanSquaredErrorWithMeanAbsoluteErrorAsMetric) {
  Regression objective;
  const torch::Tensor output = torch::tensor({1.0, 2.0, 3.0, 4.0});
  const torch::Tensor target = torch::tensor({1.0, 1.0, 5.0, 4.0});
  EXPECT_NEAR(objective.Loss(output, target).item<double>(), (0 + 1 + 4 + 0) / 4.0, 1e-6);
  EXPECT_NEAR(objective.MetricSum(output, target), 3.0, 1e-6);  // |0| + |1| + |2| + |0|
  EvalResult result;
  objective.Evaluate(output, target, result);
  EXPECT_EQ(result.count, 4);
  EXPECT_NEAR(result.metric(), 0.75, 1e-6);
  EXPECT_NEAR(result.loss(), 1.25, 1e-6);
  EXPECT_FALSE(objective.metric_is_fraction());
}

TEST(ObjectiveTest, LanguageModelIsTheMeanOverTokens) {
  LanguageModel objective(5);
  torch::manual_seed(3);
  const torch::Tensor logits = torch::randn({2, 3, 5});
  const torch::Tensor next = torch::tensor({{0, 1, 4}, {2, 2, 3}}, torch::kLong);
  // F.cross_entropy(logits.view(-1, 5), next.view(-1)): the mean over the 6 tokens.
  const torch::Tensor log_p = torch::log_softmax(logits.to(torch::kDouble), 2);
  const double expected = -log_p.gather(2, next.unsqueeze(2)).mean().item<double>();
  EXPECT_NEAR(objective.Loss(logits, next).item<double>(), expected, 1e-6);
  // Two samples of equal length: the sums of objective.h average to the token mean.
  EvalResult result;
  objective.Evaluate(logits, next, result);
  EXPECT_EQ(result.count, 2);
  EXPECT_NEAR(result.loss(), expected, 1e-6);
  const torch::Tensor right = logits.argmax(2).eq(next).to(torch::kDouble);
  EXPECT_NEAR(result.metric(), right.mean().item<double>(), 1e-12);
  EXPECT_THROW(objective.Loss(torch::zeros({2, 3, 4}), next), std::invalid_argument);
  EXPECT_THROW(objective.Loss(logits, next.narrow(1, 0, 2)), std::invalid_argument);
  EXPECT_THROW(LanguageModel(1), std::invalid_argument);
}

TEST(ObjectiveTest, ResultsAddUpAsSums) {
  Classification objective(2);
  EvalResult a(2), b(2);
  objective.Evaluate(torch::tensor({{1.0, 0.0}}), torch::tensor({0}, torch::kLong), a);
  objective.Evaluate(torch::tensor({{1.0, 0.0}, {0.0, 1.0}}), torch::tensor({1, 1}, torch::kLong),
                     b);
  EvalResult merged = a;
  merged.Merge(b);
  const EvalResult back = EvalResult::FromSums(merged.ToSums(), 2);
  EXPECT_EQ(back.count, 3);
  EXPECT_DOUBLE_EQ(back.metric_sum, 2);
  EXPECT_EQ(back.class_count, (std::vector<int64_t>{1, 2}));
  EXPECT_THROW(EvalResult::FromSums({1, 2}, 2), std::invalid_argument);
}

TEST(TensorExamplesTest, BatchesAreTheRowsAskedFor) {
  const torch::Tensor x = torch::arange(12, torch::kFloat).view({6, 2});
  const torch::Tensor y = torch::arange(6, torch::kFloat) * 10;
  TensorExamples examples("rows", x, y);
  EXPECT_EQ(examples.size(), 6);
  const Batch batch = examples.Get({4, 1}, BatchRequest{});
  EXPECT_TRUE(torch::equal(batch.inputs, torch::tensor({{8.0f, 9.0f}, {2.0f, 3.0f}})));
  EXPECT_TRUE(torch::equal(batch.targets, torch::tensor({40.0f, 10.0f})));
  EXPECT_EQ(batch.indices, (std::vector<int64_t>{4, 1}));
  EXPECT_THROW(TensorExamples("bad", x, y.narrow(0, 0, 5)), std::invalid_argument);
  EXPECT_THROW(TensorExamples("empty", torch::zeros({0, 2}), torch::zeros({0})),
               std::invalid_argument);
}

}  // namespace
}  // namespace elastic::trainer
