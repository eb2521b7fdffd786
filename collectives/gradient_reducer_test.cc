// With 2 and 3 real processes (Gloo over loopback), gradients after reduction
// must equal those of one process computing the same total batch.
#include "collectives/gradient_reducer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <map>

#include "collectives/gloo_communicator.h"
#include "collectives/tensor_ops.h"
#include "collectives/testing/subprocess.h"
#include "collectives/testing/test_store.h"

namespace elastic::collectives {
namespace {

using Args = std::map<std::string, std::string>;
constexpr int64_t kTotalBatch = 12;  // divisible by 2 and 3: equal shards

// A small MLP with one layer the forward never uses and one frozen parameter,
// so that "parameters without gradients" of both kinds are exercised.
struct Net : torch::nn::Module {
  Net() {
    // Registered first, so its bucket is the last one launched: an unused
    // parameter holds its bucket back until Finish(), as in DDP.
    unused = register_module("unused", torch::nn::Linear(3, 3));
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
    scale = register_parameter("scale", torch::ones({4}), /*requires_grad=*/false);
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))) * scale; }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, unused{nullptr};
  torch::Tensor scale;
};

std::shared_ptr<Net> MakeNet() {
  torch::manual_seed(0);
  return std::make_shared<Net>();
}

void Batch(int step, torch::Tensor* x, torch::Tensor* y) {
  torch::manual_seed(100 + step);
  *x = torch::randn({kTotalBatch, 8});
  *y = torch::randn({kTotalBatch, 4});
}

// Gradients of one process on the whole batch; undefined grads read as zeros.
std::vector<torch::Tensor> ReferenceGradients(int step) {
  auto net = MakeNet();
  torch::Tensor x, y;
  Batch(step, &x, &y);
  torch::mse_loss(net->forward(x), y).backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : net->parameters()) {
    grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  }
  return grads;
}

bool SameAsReference(const std::vector<torch::Tensor>& params, int step, int rank,
                     const char* what) {
  const auto expected = ReferenceGradients(step);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].requires_grad()) continue;
    if (!params[i].grad().defined() ||
        !torch::allclose(params[i].grad(), expected[i], 1e-5, 1e-6)) {
      std::fprintf(stderr, "rank %d: %s step %d parameter %zu differs from one process\n", rank,
                   what, step, i);
      return false;
    }
  }
  return true;
}

// Gradient accumulation (no_sync) with a summing reducer: each rank splits its
// share of the batch into two unequal micro-batches, weights each micro-batch's
// mean loss by its share of the whole batch, and only the second backward
// launches the allreduces. The result is the one-process gradient.
int CheckAccumulation(Communicator& comm, int rank, int world) {
  auto net = MakeNet();
  GradientReducerOptions options;
  options.bucket_bytes = 256;
  options.op = ReduceOp::kSum;
  GradientReducer reducer(net->parameters(), &comm, options);
  const int64_t shard = kTotalBatch / world;
  const int64_t first = shard / 2 + 1;  // 7+5 for world 1, 4+2 for 2, 3+1 for 3
  for (int step = 0; step < 2; ++step) {
    net->zero_grad();
    torch::Tensor x, y;
    Batch(step, &x, &y);
    x = x.narrow(0, rank * shard, shard);
    y = y.narrow(0, rank * shard, shard);
    const double weight_1 = static_cast<double>(first) / kTotalBatch;
    const double weight_2 = static_cast<double>(shard - first) / kTotalBatch;
    reducer.SetSync(false);
    (torch::mse_loss(net->forward(x.narrow(0, 0, first)), y.narrow(0, 0, first)) * weight_1)
        .backward();
    if (reducer.buckets_launched() != 0) {
      std::fprintf(stderr, "rank %d: a no_sync backward launched an allreduce\n", rank);
      return 1;
    }
    reducer.SetSync(true);
    (torch::mse_loss(net->forward(x.narrow(0, first, shard - first)),
                     y.narrow(0, first, shard - first)) *
     weight_2)
        .backward();
    if (reducer.buckets_launched() == 0) {
      std::fprintf(stderr, "rank %d: the synchronising backward launched nothing\n", rank);
      return 1;
    }
    reducer.Finish();
    if (!SameAsReference(net->parameters(), step, rank, "accumulated")) return 1;
  }
  return 0;
}

int RunRank(const Args& args) {
  torch::set_num_threads(1);
  const int rank = std::stoi(args.at("rank")), world = std::stoi(args.at("world"));
  auto store = testing::OpenStore(args.at("store"), "rank-" + args.at("rank"));
  GlooCommunicatorFactory factory(*store);
  auto comm = factory.Create({1, rank, world});

  // The tensor adapter: a bfloat16 average and an allgather.
  auto t = torch::full({5}, static_cast<double>(rank + 1), torch::kBFloat16);
  Allreduce(*comm, t, ReduceOp::kAverage);
  const double mean = (world + 1) / 2.0;
  if (!torch::allclose(t.to(torch::kFloat), torch::full({5}, mean))) {
    std::fprintf(stderr, "rank %d: bfloat16 average wrong\n", rank);
    return 1;
  }
  auto gathered = Allgather(*comm, torch::full({2}, static_cast<int64_t>(rank), torch::kLong));
  for (int r = 0; r < world; ++r) {
    if (gathered[r][1].item<int64_t>() != r) {
      std::fprintf(stderr, "rank %d: allgather row %d wrong\n", rank, r);
      return 1;
    }
  }

  // Tiny buckets (several per step) and the 25 MB default (one bucket).
  for (size_t bucket_bytes : {size_t{256}, size_t{25u << 20}}) {
    auto net = MakeNet();
    GradientReducerOptions options;
    options.bucket_bytes = bucket_bytes;
    GradientReducer reducer(net->parameters(), comm.get(), options);
    for (int step = 0; step < 2; ++step) {
      net->zero_grad();
      torch::Tensor x, y;
      Batch(step, &x, &y);
      const int64_t shard = kTotalBatch / world;
      auto loss = torch::mse_loss(net->forward(x.narrow(0, rank * shard, shard)),
                                  y.narrow(0, rank * shard, shard));
      reducer.Prepare();
      loss.backward();
      if (bucket_bytes == 256 && reducer.buckets_launched() == 0) {
        std::fprintf(stderr, "rank %d: no bucket was launched during backward\n", rank);
        return 1;
      }
      reducer.Finish();
      const auto expected = ReferenceGradients(step);
      const auto params = net->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        if (!params[i].requires_grad()) {
          if (params[i].grad().defined()) {
            std::fprintf(stderr, "rank %d: frozen parameter %zu got a grad\n", rank, i);
            return 1;
          }
          continue;
        }
        if (!params[i].grad().defined() ||
            !torch::allclose(params[i].grad(), expected[i], 1e-5, 1e-6)) {
          std::fprintf(
              stderr, "rank %d: bucket_bytes %zu step %d parameter %zu differs: %s\n", rank,
              bucket_bytes, step, i,
              params[i].grad().defined()
                  ? std::to_string((params[i].grad() - expected[i]).abs().max().item<float>())
                        .c_str()
                  : "undefined");
          return 1;
        }
      }
    }
    if (bucket_bytes == 256 && reducer.bucket_count() < 3) {
      std::fprintf(stderr, "rank %d: expected several buckets, got %zu\n", rank,
                   reducer.bucket_count());
      return 1;
    }
  }
  return CheckAccumulation(*comm, rank, world);
}

void RunWorld(int world) {
  testing::TestHead head;  // the processes rendezvous through a real runtime head
  const std::string store = head.spec();
  std::vector<testing::ChildProcess> children;
  for (int rank = 0; rank < world; ++rank) {
    children.push_back(
        testing::ChildProcess::SpawnSelf({"--child", "rank=" + std::to_string(rank),
                                          "world=" + std::to_string(world), "store=" + store}));
  }
  for (int rank = 0; rank < world; ++rank) {
    auto status = children[rank].WaitFor(std::chrono::seconds(300));
    ASSERT_TRUE(status.has_value()) << "rank " << rank << " hung";
    EXPECT_TRUE(testing::ExitedCleanly(*status))
        << "rank " << rank << " " << testing::DescribeStatus(*status);
  }
}

TEST(GradientReducerTest, OneProcessAccumulatingMatchesTheTotalBatch) { RunWorld(1); }
TEST(GradientReducerTest, TwoProcessesMatchOneProcessOnTheTotalBatch) { RunWorld(2); }
TEST(GradientReducerTest, ThreeProcessesMatchOneProcessOnTheTotalBatch) { RunWorld(3); }

TEST(GradientReducerTest, BucketsFollowReverseParameterOrderAndSizeLimit) {
  torch::set_num_threads(1);
  testing::TestHead head;
  auto store = testing::OpenStore(head.spec(), "layout");
  GlooCommunicatorFactory factory(*store);
  auto comm = factory.Create({1, 0, 1});
  auto net = MakeNet();
  // Parameters: 0 scale (frozen), 1 unused.w (36 B), 2 unused.b (12), 3 fc1.w (512),
  // 4 fc1.b (64), 5 fc2.w (256), 6 fc2.b (16).
  GradientReducerOptions options;
  options.bucket_bytes = 300;
  GradientReducer reducer(net->parameters(), comm.get(), options);
  const std::vector<std::vector<size_t>> expected = {{6, 5}, {4}, {3}, {2, 1}};
  EXPECT_EQ(reducer.BucketLayout(), expected);
}

}  // namespace
}  // namespace elastic::collectives

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--child") {
    elastic::collectives::Args args;
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      const auto eq = arg.find('=');
      if (eq != std::string::npos) args[arg.substr(0, eq)] = arg.substr(eq + 1);
    }
    try {
      return elastic::collectives::RunRank(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child failed: %s\n", e.what());
      return 1;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
