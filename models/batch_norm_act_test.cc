#include "models/batch_norm_act.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "models/batch_norm_kernels.h"

namespace elastic::models {
namespace {

namespace nn = torch::nn;

// What one forward and backward produced: the output, the module's running
// statistics, and the gradients of every input.
struct Result {
  torch::Tensor y, running_mean, running_var, batches, dx, dweight, dbias, dresidual;
};

struct Case {
  int64_t n = 8, channels = 16, size = 6;
  torch::Dtype dtype = torch::kFloat32;
  bool residual = false;
  Activation activation = Activation::kRelu;
  double offset = 0.0;       // added to the input: a mean large against the spread
  bool bf16_values = false;  // inputs rounded to bfloat16 (then held in dtype)
};

// A module whose parameters and running statistics are drawn from the
// global generator (seeded by the caller), away from the defaults' 1 and 0.
nn::BatchNorm2d RandomBatchNorm(int64_t channels) {
  nn::BatchNorm2d bn(channels);
  torch::NoGradGuard no_grad;
  bn->weight.uniform_(0.5, 1.5);
  bn->bias.uniform_(-0.5, 0.5);
  bn->running_mean.uniform_(-1, 1);
  bn->running_var.uniform_(0.5, 2);
  return bn;
}

// Runs BatchNormAct on a fresh module whose parameters and inputs come from
// `seed`, fused or not; the inputs are channels-last.
Result ForwardAndBackward(const Case& c, bool fused, uint64_t seed = 7) {
  torch::manual_seed(seed);
  nn::BatchNorm2d bn = RandomBatchNorm(c.channels);
  auto make = [&] {
    torch::Tensor t = torch::randn({c.n, c.channels, c.size, c.size}) * 2 + c.offset;
    if (c.bf16_values) t = t.to(torch::kBFloat16);
    return t.to(c.dtype).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_();
  };
  torch::Tensor x = make();
  torch::Tensor residual = c.residual ? make() : torch::Tensor();
  torch::Tensor upstream = torch::randn({c.n, c.channels, c.size, c.size});
  if (c.bf16_values) upstream = upstream.to(torch::kBFloat16);
  upstream = upstream.to(c.dtype);

  EnableFusedBatchNorm(fused);
  EXPECT_EQ(FusedBatchNormApplies(*bn, x, residual), fused);
  torch::Tensor y = BatchNormAct(*bn, x, c.activation, residual);
  EnableFusedBatchNorm(true);
  (y.to(torch::kFloat32) * upstream.to(torch::kFloat32)).sum().backward();
  return {y.detach().to(torch::kFloat32),
          bn->running_mean.clone(),
          bn->running_var.clone(),
          bn->num_batches_tracked.clone(),
          x.grad().to(torch::kFloat32),
          bn->weight.grad().clone(),
          bn->bias.grad().clone(),
          c.residual ? residual.grad().to(torch::kFloat32) : torch::Tensor()};
}

// |a - b| <= tolerance * max|b| everywhere: scaled to the tensor's magnitude,
// which is what rounding in the narrower type is relative to.
void ExpectClose(const torch::Tensor& a, const torch::Tensor& b, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double scale = std::max(b.abs().max().item<double>(), 1e-6);
  const double error = (a - b).abs().max().item<double>();
  EXPECT_LE(error, tolerance * scale) << what << ": max error " << error << ", scale " << scale;
}

void ExpectSame(const Result& fused, const Result& reference, double tolerance) {
  ExpectClose(fused.y, reference.y, tolerance, "output");
  ExpectClose(fused.running_mean, reference.running_mean, 1e-5, "running mean");
  ExpectClose(fused.running_var, reference.running_var, 1e-5, "running variance");
  EXPECT_TRUE(torch::equal(fused.batches, reference.batches)) << "num_batches_tracked";
  ExpectClose(fused.dx, reference.dx, tolerance, "input gradient");
  ExpectClose(fused.dweight, reference.dweight, tolerance, "weight gradient");
  ExpectClose(fused.dbias, reference.dbias, tolerance, "bias gradient");
  ASSERT_EQ(fused.dresidual.defined(), reference.dresidual.defined());
  if (fused.dresidual.defined()) {
    ExpectClose(fused.dresidual, reference.dresidual, tolerance, "residual gradient");
  }
}

TEST(BatchNormActTest, MatchesBatchNormAndReluInFloat) {
  const Case c;
  ExpectSame(ForwardAndBackward(c, true), ForwardAndBackward(c, false), 1e-5);
}

TEST(BatchNormActTest, MatchesBatchNormAddAndReluInFloat) {
  Case c;
  c.residual = true;
  ExpectSame(ForwardAndBackward(c, true), ForwardAndBackward(c, false), 1e-5);
}

TEST(BatchNormActTest, MatchesBatchNormAloneInFloat) {
  Case c;
  c.activation = Activation::kIdentity;
  ExpectSame(ForwardAndBackward(c, true), ForwardAndBackward(c, false), 1e-5);
}

// 19 channels: the vector loops' remainders; 2 threads and enough rows for
// the statistics to be summed in two chunks.
TEST(BatchNormActTest, OddChannelCountAndTwoThreads) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  Case c;
  c.n = 16;
  c.channels = 19;
  c.size = 16;
  c.residual = true;
  ExpectSame(ForwardAndBackward(c, true), ForwardAndBackward(c, false), 1e-5);
  at::set_num_threads(threads);
}

// Wide and odd channel counts (blocks of 64, 32, 16, 8 and single channels)
// over few rows, as in the last stages of the deep models.
TEST(BatchNormActTest, WideChannelsOverFewRows) {
  for (const int64_t channels : {100, 512, 2048}) {
    for (const int64_t size : {1, 2, 4}) {
      Case c;
      c.n = 4;
      c.channels = channels;
      c.size = size;
      c.residual = true;
      SCOPED_TRACE("channels " + std::to_string(channels) + " size " + std::to_string(size));
      ExpectSame(ForwardAndBackward(c, true), ForwardAndBackward(c, false), 1e-4);
    }
  }
}

// A channel mean 500 times its spread: a naive sum of squares in float would
// lose the variance; the shifted sums keep it.
TEST(BatchNormActTest, LargeMeanKeepsTheVariance) {
  Case c;
  c.offset = 1000.0;
  ExpectSame(ForwardAndBackward(c, true), ForwardAndBackward(c, false), 1e-4);
}

// In bfloat16 the fused node computes in float and rounds its results once;
// against the same bf16 values computed in float it is off by a few units of
// bf16's last place (8 significant bits), and the ReLU masks agree. (ATen's
// bf16 ops round after batch norm and again after the add, so near zero its
// mask differs from the float one: it is not the reference here.)
TEST(BatchNormActTest, MatchesFloatOnBfloat16Values) {
  Case c;
  c.residual = true;
  c.bf16_values = true;
  const Result reference = ForwardAndBackward(c, false);
  c.dtype = torch::kBFloat16;
  ExpectSame(ForwardAndBackward(c, true), reference, 2e-2);
}

// A NaN in the input makes its channel's statistics, and so every output of
// that channel, NaN (not infinity, not a number that looks healthy); the
// other channels are untouched.
TEST(BatchNormActTest, NanPropagatesInBfloat16) {
  nn::BatchNorm2d bn(4);
  auto x = torch::randn({2, 4, 3, 3});
  x[1][2][1][1] = std::numeric_limits<float>::quiet_NaN();
  x = x.to(torch::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
  ASSERT_TRUE(FusedBatchNormApplies(*bn, x));
  const auto y = BatchNormAct(*bn, x, Activation::kIdentity).to(torch::kFloat32);
  EXPECT_TRUE(torch::isnan(y.select(1, 2)).all().item<bool>()) << y.select(1, 2);
  EXPECT_FALSE(torch::isnan(y.select(1, 0)).any().item<bool>());
  EXPECT_FALSE(torch::isinf(y).any().item<bool>());
}

TEST(BatchNormActTest, OutputKeepsTheInputsTypeAndLayout) {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    nn::BatchNorm2d bn(4);
    const auto x = torch::randn({2, 4, 3, 3}).to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
    ASSERT_TRUE(FusedBatchNormApplies(*bn, x));
    const auto y = BatchNormAct(*bn, x, Activation::kRelu);
    EXPECT_EQ(y.scalar_type(), dtype);
    EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_GE(y.min().item<float>(), 0.0f);
  }
}

// Training over a few hundred steps, as a run does: the fused node and ATen's
// ops each train a module of their own from the same start on the same
// batches (plain SGD on the affine parameters), and stay together: outputs at
// every step, then the running statistics, the step count, the parameters and
// the evaluation output at the end. A bias in the running statistics that one
// step hides (variance, momentum) adds up here.
TEST(BatchNormActTest, ManyTrainingStepsMatchATen) {
  const int64_t channels = 24, steps = 300;
  torch::manual_seed(21);
  nn::BatchNorm2d fused = RandomBatchNorm(channels);
  nn::BatchNorm2d reference(channels);
  {
    torch::NoGradGuard no_grad;
    reference->weight.copy_(fused->weight);
    reference->bias.copy_(fused->bias);
    reference->running_mean.copy_(fused->running_mean);
    reference->running_var.copy_(fused->running_var);
  }
  const double lr = 0.05;
  double worst_output = 0;
  for (int64_t step = 0; step < steps; ++step) {
    // Batches whose statistics drift, as activations do while a model trains.
    const double drift = static_cast<double>(step) / steps;
    const torch::Tensor x = (torch::randn({32, channels, 8, 8}) * (1 + drift) + 2 * drift)
                                .contiguous(at::MemoryFormat::ChannelsLast);
    const torch::Tensor residual =
        torch::randn({32, channels, 8, 8}).contiguous(at::MemoryFormat::ChannelsLast);
    const torch::Tensor upstream = torch::randn({32, channels, 8, 8});
    torch::Tensor outputs[2];
    for (const bool use_fused : {true, false}) {
      nn::BatchNorm2d& bn = use_fused ? fused : reference;
      EnableFusedBatchNorm(use_fused);
      ASSERT_EQ(FusedBatchNormApplies(*bn, x, residual), use_fused);
      const torch::Tensor input = x.clone().requires_grad_();
      const torch::Tensor y = BatchNormAct(*bn, input, Activation::kRelu, residual);
      EnableFusedBatchNorm(true);
      (y * upstream).mean().backward();
      torch::NoGradGuard no_grad;
      for (torch::Tensor* p : {&bn->weight, &bn->bias}) {
        p->sub_(p->grad() * lr);
        p->mutable_grad().zero_();
      }
      outputs[use_fused ? 0 : 1] = y.detach();
    }
    const double scale = outputs[1].abs().max().item<double>();
    worst_output =
        std::max(worst_output, (outputs[0] - outputs[1]).abs().max().item<double>() / scale);
  }
  EXPECT_LE(worst_output, 1e-5) << "largest relative output difference over " << steps << " steps";
  ExpectClose(fused->running_mean, reference->running_mean, 1e-5, "running mean");
  ExpectClose(fused->running_var, reference->running_var, 1e-5, "running variance");
  EXPECT_TRUE(torch::equal(fused->num_batches_tracked, reference->num_batches_tracked));
  ExpectClose(fused->weight, reference->weight, 1e-5, "weight");
  ExpectClose(fused->bias, reference->bias, 1e-5, "bias");
  // The statistics moved: a kernel that never updated them would not pass.
  EXPECT_GT(fused->running_mean.mean().item<double>(), 1.0);

  torch::NoGradGuard no_grad;
  fused->eval();
  reference->eval();
  const torch::Tensor x =
      (torch::randn({16, channels, 8, 8}) * 2 + 2).contiguous(at::MemoryFormat::ChannelsLast);
  ASSERT_TRUE(FusedBatchNormApplies(*fused, x));
  EnableFusedBatchNorm(false);
  const torch::Tensor want = BatchNormAct(*reference, x, Activation::kRelu);
  EnableFusedBatchNorm(true);
  ExpectClose(BatchNormAct(*fused, x, Activation::kRelu), want, 1e-5, "evaluation output");
}

// Evaluation with autograd off: the running statistics, as the module uses them.
TEST(BatchNormActTest, EvaluationMatchesTheModule) {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    torch::manual_seed(3);
    nn::BatchNorm2d bn = RandomBatchNorm(5);
    bn->eval();
    torch::NoGradGuard no_grad;
    const auto x = torch::randn({3, 5, 4, 4}).to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
    const auto r = torch::randn({3, 5, 4, 4}).to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
    ASSERT_TRUE(FusedBatchNormApplies(*bn, x, r));
    const auto expected = torch::relu(bn->forward(x.to(torch::kFloat32)) + r.to(torch::kFloat32));
    const auto y = BatchNormAct(*bn, x, Activation::kRelu, r);
    EXPECT_EQ(y.scalar_type(), dtype);
    ExpectClose(y.to(torch::kFloat32), expected, dtype == torch::kFloat32 ? 1e-6 : 1e-2,
                "evaluation output");
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
  }
}

// Contiguous tensors, a residual of another type, a single value per channel,
// evaluation with autograd on: the module and ATen's ops, with their results
// and errors.
TEST(BatchNormActTest, FallsBackWhereTheKernelDoesNotApply) {
  nn::BatchNorm2d bn(4);
  const auto channels_last = torch::randn({2, 4, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast);
  EXPECT_FALSE(FusedBatchNormApplies(*bn, torch::randn({2, 4, 3, 3})));
  EXPECT_FALSE(FusedBatchNormApplies(*bn, channels_last, channels_last.to(torch::kBFloat16)));
  EXPECT_FALSE(FusedBatchNormApplies(*bn, torch::randn({1, 4, 1, 1})));
  EXPECT_THROW(BatchNormAct(*bn, torch::randn({1, 4, 1, 1}), Activation::kRelu), c10::Error);

  bn->eval();
  EXPECT_FALSE(FusedBatchNormApplies(*bn, channels_last));
  const auto expected = torch::relu(bn->forward(channels_last) + channels_last);
  const auto y = BatchNormAct(*bn, channels_last, Activation::kRelu, channels_last);
  EXPECT_TRUE(torch::allclose(y, expected));
}

// Every compiled version of the kernels (baseline, AVX2, AVX512: each one a
// CPU of this kind may run) against ATen's batch norm in float64, in training
// (output, running statistics, every gradient) and in evaluation, on float
// and bfloat16 inputs. 123 channels: blocks of 64, 32, 16 and 8 channels and
// single ones; 648 rows: several tiles and a short last one. A version this
// CPU cannot run is named in the log, not silently passed.
class KernelVersionTest : public ::testing::TestWithParam<kernels::InstructionSet> {
 protected:
  void SetUp() override {
    const auto sets = kernels::InstructionSetsOfThisCpu();
    if (std::find(sets.begin(), sets.end(), GetParam()) == sets.end()) {
      GTEST_SKIP() << "the " << kernels::InstructionSetName(GetParam())
                   << " kernels are not tested here: this CPU cannot run them (its cpuid lacks "
                      "the instructions); a machine that has them tests them";
    }
    kernels::UseInstructionSet(GetParam());
    ASSERT_EQ(kernels::ActiveInstructionSet(), GetParam());
  }
  void TearDown() override { kernels::UseInstructionSet(std::nullopt); }
};

struct Float64Reference {
  torch::Tensor y, running_mean, running_var, dx, dweight, dbias, dresidual;
};

// nn::BatchNorm2d's maths in float64 on the same values: batch statistics,
// biased variance to normalise, unbiased for the running variance.
Float64Reference TrainInFloat64(const nn::BatchNorm2d& bn, const torch::Tensor& x,
                                const torch::Tensor& residual, const torch::Tensor& upstream,
                                bool relu) {
  auto as_double = [](const torch::Tensor& t) {
    return t.detach().to(torch::kDouble).contiguous().requires_grad_();
  };
  torch::Tensor input = as_double(x), weight = as_double(bn->weight), bias = as_double(bn->bias);
  torch::Tensor shortcut = residual.defined() ? as_double(residual) : torch::Tensor();
  torch::Tensor mean = bn->running_mean.to(torch::kDouble),
                var = bn->running_var.to(torch::kDouble);
  torch::Tensor y = torch::batch_norm(input, weight, bias, mean, var, /*training=*/true,
                                      bn->options.momentum().value(), bn->options.eps(), false);
  if (shortcut.defined()) y = y + shortcut;
  if (relu) y = torch::relu(y);
  (y * upstream.to(torch::kDouble)).sum().backward();
  return {y.detach(),
          mean,
          var,
          input.grad(),
          weight.grad(),
          bias.grad(),
          shortcut.defined() ? shortcut.grad() : torch::Tensor()};
}

TEST_P(KernelVersionTest, TrainingMatchesFloat64) {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const bool residual : {false, true}) {
      for (const bool relu : {false, true}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + (residual ? " + residual" : "") +
                     (relu ? " + relu" : ""));
        torch::manual_seed(11);
        nn::BatchNorm2d bn = RandomBatchNorm(123);
        auto make = [&](double offset) {
          return (torch::randn({8, 123, 9, 9}) * 2 + offset)
              .to(dtype)
              .contiguous(at::MemoryFormat::ChannelsLast)
              .requires_grad_();
        };
        torch::Tensor x = make(3.0);
        torch::Tensor shortcut = residual ? make(0.0) : torch::Tensor();
        torch::Tensor upstream = torch::randn({8, 123, 9, 9}).to(dtype).to(torch::kFloat32);
        const Float64Reference want = TrainInFloat64(bn, x, shortcut, upstream, relu);

        ASSERT_TRUE(FusedBatchNormApplies(*bn, x, shortcut));
        torch::Tensor y =
            BatchNormAct(*bn, x, relu ? Activation::kRelu : Activation::kIdentity, shortcut);
        (y.to(torch::kFloat32) * upstream).sum().backward();
        // float: float's rounding; bfloat16: one rounding of each result to
        // 8 significant bits.
        const double tolerance = dtype == torch::kFloat32 ? 1e-5 : 1e-2;
        ExpectClose(y.detach().to(torch::kDouble), want.y, tolerance, "output");
        ExpectClose(bn->running_mean.to(torch::kDouble), want.running_mean, 1e-6, "running mean");
        ExpectClose(bn->running_var.to(torch::kDouble), want.running_var, 1e-6, "running variance");
        ExpectClose(x.grad().to(torch::kDouble), want.dx, tolerance, "input gradient");
        ExpectClose(bn->weight.grad().to(torch::kDouble), want.dweight, 1e-5, "weight gradient");
        ExpectClose(bn->bias.grad().to(torch::kDouble), want.dbias, 1e-5, "bias gradient");
        if (residual) {
          ExpectClose(shortcut.grad().to(torch::kDouble), want.dresidual, tolerance,
                      "residual gradient");
        }
      }
    }
  }
}

TEST_P(KernelVersionTest, EvaluationMatchesFloat64) {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(12);
    nn::BatchNorm2d bn = RandomBatchNorm(123);
    bn->eval();
    torch::NoGradGuard no_grad;
    const auto x =
        torch::randn({8, 123, 9, 9}).to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
    const auto r =
        torch::randn({8, 123, 9, 9}).to(dtype).contiguous(at::MemoryFormat::ChannelsLast);
    ASSERT_TRUE(FusedBatchNormApplies(*bn, x, r));
    const auto d = [](const torch::Tensor& t) { return t.to(torch::kDouble); };
    const auto want =
        torch::relu(torch::batch_norm(d(x), d(bn->weight), d(bn->bias), d(bn->running_mean),
                                      d(bn->running_var), false, 0.1, bn->options.eps(), false) +
                    d(r));
    const auto y = BatchNormAct(*bn, x, Activation::kRelu, r);
    ExpectClose(d(y), want, dtype == torch::kFloat32 ? 1e-6 : 1e-2, "evaluation output");
  }
}

INSTANTIATE_TEST_SUITE_P(EveryVersion, KernelVersionTest,
                         ::testing::Values(kernels::InstructionSet::kBaseline,
                                           kernels::InstructionSet::kAvx2,
                                           kernels::InstructionSet::kAvx512),
                         [](const auto& info) {
                           return std::string(kernels::InstructionSetName(info.param));
                         });

TEST(KernelVersionTest, AVersionThisCpuCannotRunIsRefused) {
  const auto sets = kernels::InstructionSetsOfThisCpu();
  ASSERT_FALSE(sets.empty());
  EXPECT_EQ(sets.front(), kernels::InstructionSet::kBaseline);
  EXPECT_EQ(kernels::ActiveInstructionSet(), sets.back()) << "the widest runs by default";
  if (sets.back() != kernels::InstructionSet::kAvx512) {
    EXPECT_THROW(kernels::UseInstructionSet(kernels::InstructionSet::kAvx512),
                 std::invalid_argument);
    EXPECT_EQ(kernels::ActiveInstructionSet(), sets.back());
  }
}

}  // namespace
}  // namespace elastic::models
