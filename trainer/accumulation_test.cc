// --global-batch made exact: with the step's samples split over 1, 2 and 3 real
// processes (Gloo over loopback) and each rank's share cut into micro-batches,
// the parameters after several optimizer steps equal those of one process
// taking each step on all the step's samples at once.
#include "trainer/accumulation.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <string>

#include "collectives/gloo_communicator.h"
#include "collectives/tensor_ops.h"
#include "collectives/testing/subprocess.h"
#include "collectives/testing/test_store.h"
#include "models/net.h"
#include "trainer/sampler.h"

namespace elastic::trainer {
namespace {

namespace testing = collectives::testing;
using Args = std::map<std::string, std::string>;

constexpr int64_t kSamples = 50;
constexpr int64_t kGlobalBatch = 20;  // steps of 20, 20, 10 per epoch
constexpr int64_t kMicroBatch = 5;    // one rank: 4 micro-batches per full step
constexpr int kSteps = 5;             // into the second epoch

// No batch norm: micro-batching leaves the gradient exactly the big batch's.
struct Mlp : models::Net {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(3 * 32 * 32, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 10));
  }
  torch::Tensor forward(torch::Tensor x) override { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

std::unique_ptr<Learner> MakeLearner() {
  LearnerOptions o;
  o.model_name = "mlp";
  o.optimizer.lr = 0.1;
  o.optimizer.momentum = 0.9;
  o.optimizer.nesterov = true;
  o.optimizer.weight_decay = 5e-4;
  o.schedule.kind = ScheduleKind::kConstant;
  o.schedule.base_lr = 0.1;
  o.schedule.warmup_epochs = 0;
  o.label_smoothing = 0.1;
  o.clip_grad = 5;
  SeedTorch(0);
  return std::make_unique<Learner>(std::make_shared<Mlp>(), o, torch::kCPU);
}

struct Data {
  Data() {
    torch::manual_seed(42);
    inputs = torch::randn({kSamples, 3, 32, 32});
    targets = torch::randint(0, 10, {kSamples}, torch::kLong);
  }
  torch::Tensor inputs, targets;
};

torch::Tensor Select(const torch::Tensor& t, const std::vector<int64_t>& indices) {
  return t.index_select(0, torch::tensor(indices, torch::kLong));
}

// Walks kSteps optimizer steps of the sampler's epochs; `step` trains one.
template <typename TrainStep>
void ForEachStep(const TrainStep& step) {
  ElasticSampler sampler(kSamples, 3);
  int64_t epoch = 0, position = 0;
  for (int i = 0; i < kSteps; ++i) {
    if (position >= kSamples) {
      ++epoch;
      position = 0;
    }
    const std::vector<int64_t> perm = sampler.Permutation(static_cast<uint64_t>(epoch));
    step(sampler, perm, position, std::min(kGlobalBatch, kSamples - position));
    position = sampler.NextPosition(position, kGlobalBatch);
  }
}

// One process, one batch of all the step's samples per step.
std::vector<torch::Tensor> ReferenceParameters() {
  const Data data;
  auto learner = MakeLearner();
  ForEachStep([&](const ElasticSampler& sampler, const std::vector<int64_t>& perm, int64_t position,
                  int64_t) {
    const std::vector<int64_t> all = sampler.StepIndices(perm, position, 0, 1, kGlobalBatch);
    learner->Step(Select(data.inputs, all), Select(data.targets, all), 0);
  });
  std::vector<torch::Tensor> params;
  for (const auto& p : learner->parameters()) params.push_back(p.detach().clone());
  return params;
}

int RunRank(const Args& args) {
  torch::set_num_threads(1);
  const int rank = std::stoi(args.at("rank")), world = std::stoi(args.at("world"));
  auto store = testing::OpenStore(args.at("store"), "rank-" + args.at("rank"));
  collectives::GlooCommunicatorFactory factory(*store);
  auto comm = factory.Create({1, rank, world});

  const Data data;
  auto learner = MakeLearner();
  SummingGradientHook hook(learner->parameters(), *comm);
  int64_t micro_batches = 0;
  ForEachStep([&](const ElasticSampler& sampler, const std::vector<int64_t>& perm, int64_t position,
                  int64_t step_samples) {
    const std::vector<int64_t> mine =
        sampler.StepIndices(perm, position, rank, world, kGlobalBatch);
    const std::vector<MicroBatch> micro = SplitIntoMicroBatches(
        Select(data.inputs, mine), Select(data.targets, mine), kMicroBatch, step_samples);
    micro_batches += static_cast<int64_t>(micro.size());
    learner->Step(micro, 0, &hook);
  });
  // World 1 accumulates 4+4+2 micro-batches in the first epoch's three steps.
  if (world == 1 && micro_batches != 4 + 4 + 2 + 4 + 4) {
    std::fprintf(stderr, "world 1: %lld micro-batches\n", static_cast<long long>(micro_batches));
    return 1;
  }

  const std::vector<torch::Tensor> expected = ReferenceParameters();
  for (size_t i = 0; i < expected.size(); ++i) {
    const torch::Tensor mine = learner->parameters()[i].detach().contiguous();
    if (!torch::allclose(mine, expected[i], 1e-5, 1e-6)) {
      std::fprintf(stderr, "rank %d of %d: parameter %zu differs from one big batch by %g\n", rank,
                   world, i, (mine - expected[i]).abs().max().item<double>());
      return 1;
    }
    // Every rank stepped on the same summed gradients: bit-identical parameters.
    torch::Tensor root = mine.clone();
    collectives::Broadcast(*comm, root, 0);
    if (!torch::equal(root, mine)) {
      std::fprintf(stderr, "rank %d: parameter %zu differs from rank 0's\n", rank, i);
      return 1;
    }
  }
  if (expected[0].equal(MakeLearner()->parameters()[0])) {
    std::fprintf(stderr, "the parameters did not move\n");
    return 1;
  }
  return 0;
}

void RunWorld(int world) {
  testing::TestHead head;
  std::vector<testing::ChildProcess> children;
  for (int rank = 0; rank < world; ++rank) {
    children.push_back(testing::ChildProcess::SpawnSelf({"--child", "rank=" + std::to_string(rank),
                                                         "world=" + std::to_string(world),
                                                         "store=" + head.spec()}));
  }
  for (int rank = 0; rank < world; ++rank) {
    auto status = children[rank].WaitFor(std::chrono::seconds(300));
    ASSERT_TRUE(status.has_value()) << "rank " << rank << " hung";
    EXPECT_TRUE(testing::ExitedCleanly(*status))
        << "rank " << rank << " " << testing::DescribeStatus(*status);
  }
}

TEST(AccumulationTest, OneRankWithFourMicroBatchesMatchesOneBigBatch) { RunWorld(1); }
TEST(AccumulationTest, TwoRanksMatchOneBigBatch) { RunWorld(2); }
TEST(AccumulationTest, ThreeRanksWithUnevenSharesMatchOneBigBatch) { RunWorld(3); }

TEST(AccumulationTest, SplitIntoMicroBatchesWeighsBySamples) {
  const torch::Tensor images = torch::arange(7).view({7, 1});
  const torch::Tensor labels = torch::arange(7);
  const std::vector<MicroBatch> micro = SplitIntoMicroBatches(images, labels, 3, 20);
  ASSERT_EQ(micro.size(), 3u);  // 7 at most 3 at a time: 3, 2, 2
  EXPECT_EQ(micro[0].inputs.size(0), 3);
  EXPECT_EQ(micro[1].inputs.size(0), 2);
  EXPECT_EQ(micro[2].targets.size(0), 2);
  EXPECT_EQ(micro[2].targets[1].item<int64_t>(), 6);  // in order, nothing lost
  EXPECT_DOUBLE_EQ(micro[0].weight, 3.0 / 20);
  EXPECT_DOUBLE_EQ(micro[1].weight, 2.0 / 20);
  EXPECT_EQ(SplitIntoMicroBatches(images, labels, 8, 7).size(), 1u);
  EXPECT_THROW(SplitIntoMicroBatches(images, labels, 0, 20), std::invalid_argument);
  EXPECT_THROW(SplitIntoMicroBatches(images, labels, 3, 6), std::invalid_argument);
  EXPECT_THROW(SplitIntoMicroBatches(images.narrow(0, 0, 0), labels.narrow(0, 0, 0), 3, 6),
               std::invalid_argument);
}

}  // namespace
}  // namespace elastic::trainer

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--child") {
    std::map<std::string, std::string> args;
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      const auto eq = arg.find('=');
      if (eq != std::string::npos) args[arg.substr(0, eq)] = arg.substr(eq + 1);
    }
    try {
      return elastic::trainer::RunRank(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child failed: %s\n", e.what());
      return 1;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
