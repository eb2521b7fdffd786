// Batch norm's statistics re-estimated before evaluating, in one process.
// (Across ranks: the elastic tests run it at every evaluation, and their
// end-of-run check that the ranks agree compares every buffer.)
#include "trainer/batch_norm_statistics.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <numeric>
#include <vector>

#include "models/registry.h"
#include "trainer/data/examples.h"

namespace elastic::trainer {
namespace {

// A batch norm on its input, nothing else: its statistics are the input's.
class JustBatchNorm : public models::Net {
 public:
  JustBatchNorm() : bn_(register_module("bn", torch::nn::BatchNorm2d(3))) {}
  torch::Tensor forward(torch::Tensor x) override { return bn_->forward(x); }
  torch::nn::BatchNorm2d bn_;
};

class NoBatchNorm : public models::Net {
 public:
  NoBatchNorm() : fc_(register_module("fc", torch::nn::Linear(12, 2))) {}
  torch::Tensor forward(torch::Tensor x) override { return fc_->forward(x.flatten(1)); }
  torch::nn::Linear fc_;
};

Loader MakeLoader(const torch::Tensor& inputs, int64_t batch_size) {
  auto examples = std::make_shared<TensorExamples>("random", inputs,
                                                   torch::zeros({inputs.size(0)}, torch::kInt64));
  LoaderOptions options;
  options.batch_size = batch_size;
  options.augment = false;
  options.threads = 1;
  return Loader(examples, options);
}

std::vector<int64_t> FirstIndices(int64_t n) {
  std::vector<int64_t> indices(n);
  std::iota(indices.begin(), indices.end(), 0);
  return indices;
}

int64_t Recompute(models::Net& model, const torch::Tensor& inputs, int64_t batch_size) {
  Loader loader = MakeLoader(inputs, batch_size);
  return RecomputeBatchNormStatistics(model, loader, FirstIndices(inputs.size(0)), torch::kCPU,
                                      Precision::kFloat32, nullptr);
}

TEST(BatchNormStatisticsTest, ThePlainAverageOfTheBatchStatistics) {
  torch::manual_seed(0);
  JustBatchNorm model;
  model.bn_->running_mean.fill_(7);  // whatever the running averages held
  model.bn_->num_batches_tracked.fill_(42);
  const torch::Tensor x = torch::randn({48, 3, 4, 4}) * 2 + 1;
  ASSERT_EQ(Recompute(model, x, 16), 3);
  torch::Tensor means = torch::zeros({3}), vars = torch::zeros({3});
  for (int b = 0; b < 3; ++b) {
    const torch::Tensor batch = x.slice(0, 16 * b, 16 * (b + 1)).transpose(0, 1).flatten(1);
    means += batch.mean(1) / 3;
    vars += batch.var(1, /*unbiased=*/true) / 3;
  }
  EXPECT_TRUE(torch::allclose(model.bn_->running_mean, means, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(model.bn_->running_var, vars, 1e-5, 1e-6));
  // The module is as it was in every other respect.
  EXPECT_EQ(model.bn_->num_batches_tracked.item<int64_t>(), 42);
  ASSERT_TRUE(model.bn_->options.momentum().has_value());
  EXPECT_DOUBLE_EQ(*model.bn_->options.momentum(), 0.1);
  EXPECT_TRUE(model.is_training());
}

// With the statistics of one batch, eval mode computes what train mode did on
// that batch, through a whole network (up to n / (n - 1), the unbiased variance).
TEST(BatchNormStatisticsTest, EvalModeThenReproducesTrainModeOnThatBatch) {
  torch::manual_seed(1);
  std::shared_ptr<models::Net> model = models::CreateModel("resnet8", 10);
  const torch::Tensor x = torch::randn({64, 3, 32, 32});
  std::vector<torch::Tensor> weights;
  for (const torch::Tensor& p : model->parameters()) weights.push_back(p.detach().clone());
  torch::NoGradGuard no_grad;
  model->train();
  const torch::Tensor trained = model->forward(x);
  model->eval();
  const torch::Tensor before = model->forward(x);
  ASSERT_GT((before - trained).abs().max().item<double>(), 0.1);  // the test can fail

  model->train();
  ASSERT_EQ(Recompute(*model, x, 64), 1);
  model->eval();
  const torch::Tensor after = model->forward(x);
  EXPECT_LT((after - trained).abs().max().item<double>(),
            1e-2 * trained.abs().max().item<double>());
  const std::vector<torch::Tensor> now = model->parameters();
  for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(torch::equal(now[i], weights[i]));
}

TEST(BatchNormStatisticsTest, AModelWithoutBatchNormIsLeftAlone) {
  NoBatchNorm model;
  EXPECT_EQ(Recompute(model, torch::randn({8, 3, 2, 2}), 4), 0);
}

TEST(BatchNormStatisticsTest, NoSamplesKeepTheRunningAverages) {
  JustBatchNorm model;
  model.bn_->running_mean.fill_(3);
  Loader loader = MakeLoader(torch::randn({4, 3, 2, 2}), 4);
  EXPECT_EQ(
      RecomputeBatchNormStatistics(model, loader, {}, torch::kCPU, Precision::kFloat32, nullptr),
      0);
  EXPECT_TRUE(torch::equal(model.bn_->running_mean, torch::full({3}, 3.0)));
  EXPECT_TRUE(torch::equal(model.bn_->running_var, torch::ones({3})));
}

}  // namespace
}  // namespace elastic::trainer
