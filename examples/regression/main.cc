// An elastic trainer of your own, end to end: a small regression, not image
// classification, written against the public API (api/elastic.h) alone.
//
// The data are generated (the same in every process, from a fixed seed): 8
// features x ~ N(0, 1) and a target y = sin(x0) + x1 x2 / 2 - 0.3 x3^2 +
// noise. The model is a two-hidden-layer MLP, the objective the mean squared
// error (reported as the mean absolute error). Every flag of cifar works:
//
//   bazel run //examples/regression -- --epochs 20                 # one process
//   bazel run //examples/regression -- --workers 4 --epochs 20     # elastic, 4 workers
//   bazel run //examples/regression -- --join HOST:PORT --token-file F --workers 2
//
// docs/writing-a-trainer.md explains each part.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "api/elastic.h"

namespace {

constexpr int64_t kFeatures = 8;
constexpr int64_t kTrainSamples = 3072;
constexpr int64_t kTestSamples = 1024;

// The model: any LibTorch module with forward(Tensor) -> Tensor.
class Mlp : public elastic::Model {
 public:
  Mlp()
      : hidden1_(register_module("hidden1", torch::nn::Linear(kFeatures, 64))),
        hidden2_(register_module("hidden2", torch::nn::Linear(64, 64))),
        out_(register_module("out", torch::nn::Linear(64, 1))) {}

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(hidden1_->forward(x));
    x = torch::relu(hidden2_->forward(x));
    return out_->forward(x).squeeze(1);
  }

 private:
  torch::nn::Linear hidden1_, hidden2_, out_;
};

// Inputs [n, 8] and targets [n] from their own generator: every process
// builds the very same samples, whatever else it seeded.
std::shared_ptr<elastic::TensorExamples> Generate(const char* name, int64_t n, uint64_t seed) {
  torch::Generator generator = at::detail::createCPUGenerator(seed);
  const torch::Tensor x = torch::randn({n, kFeatures}, generator);
  const torch::Tensor noise = torch::randn({n}, generator);
  const torch::Tensor y = torch::sin(x.select(1, 0)) + 0.5 * x.select(1, 1) * x.select(1, 2) -
                          0.3 * x.select(1, 3).pow(2) + 0.05 * noise;
  return std::make_shared<elastic::TensorExamples>(name, x, y);
}

elastic::Task RegressionTask(const elastic::TrainOptions&) {
  elastic::Task task;
  task.name = "regression";
  task.model_name = "regression-mlp";
  task.model = [] { return std::make_shared<Mlp>(); };
  task.train = Generate("regression-train", kTrainSamples, 1);
  task.test = Generate("regression-test", kTestSamples, 2);
  task.objective = std::make_shared<elastic::Regression>();
  return task;
}

}  // namespace

int main(int argc, char** argv) {
  elastic::Program program;
  program.name = "regression";
  program.summary =
      "Trains a small MLP to regress a nonlinear function of 8 generated features: an example\n"
      "of a trainer written against the public API (api/elastic.h), with every flag of cifar.";
  program.make_task = RegressionTask;
  program.controller_metric = {"mean abs error", /*percent=*/false, "mean abs error"};
  // A recipe for this task: Adam with a constant rate from the first step (a
  // small MLP needs no warm-up), small batches, no image augmentation, full
  // precision (an MLP gains nothing from bf16).
  program.defaults.optimizer = "adam";
  program.defaults.lr = 0.002;
  program.defaults.weight_decay = 0;
  program.defaults.schedule = "constant";
  program.defaults.warmup_epochs = 0;
  program.defaults.epochs = 20;
  program.defaults.batch_size = 32;
  program.defaults.augment = false;
  program.defaults.precision = "fp32";
  return elastic::Main(argc, argv, program);
}
