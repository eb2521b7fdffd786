// The training step and its parts: optimizers, Lookahead, loss scaling,
// autocast, clipping, the gradient hook, and state capture / restore.
#include "trainer/learner.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/net.h"
#include "models/registry.h"
#include "trainer/amp.h"
#include "trainer/bytes.h"
#include "trainer/device.h"
#include "trainer/optimizer.h"

namespace elastic::trainer {
namespace {

// loss = sum(w * c): the gradient of w is c, whatever w is.
void LinearGradient(const torch::Tensor& w, const torch::Tensor& c) {
  if (w.grad().defined()) w.mutable_grad().zero_();
  (w * c).sum().backward();
}

TEST(OptimizerTest, SgdNesterovWithWeightDecayMatchesTheFormula) {
  torch::Tensor w =
      torch::tensor({1.0, -2.0}, torch::TensorOptions(torch::kDouble).requires_grad(true));
  OptimizerOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 0.01;
  auto sgd = MakeOptimizer({w}, o);
  const torch::Tensor c = torch::tensor({0.5, 0.25}, torch::kDouble);
  torch::Tensor expected = w.detach().clone();
  torch::Tensor buf;
  for (int step = 0; step < 3; ++step) {
    LinearGradient(w, c);
    sgd->Step();
    // torch.optim.SGD: g = grad + wd*w; buf = m*buf + g (buf = g first); g = g + m*buf.
    const torch::Tensor g = c + o.weight_decay * expected;
    buf = step == 0 ? g.clone() : o.momentum * buf + g;
    expected = expected - o.lr * (g + o.momentum * buf);
  }
  EXPECT_TRUE(torch::allclose(w.detach(), expected, 1e-12, 1e-12)) << w << expected;
}

// Golden values from torch 1.13 in Python: torch.optim.AdamW with the groups
// [{W, weight_decay 0.1}, {b, weight_decay 0}], lr 1e-2, betas (0.9, 0.99),
// and torch.nn.utils.clip_grad_norm_([W, b], 1.0) before each of three steps
// (float64, the gradients below).
TEST(OptimizerTest, AdamWWithClippingMatchesTorch) {
  const auto f64 = torch::TensorOptions(torch::kDouble);
  torch::Tensor w = torch::tensor({0.5, -1.0, 2.0, 0.25, 0.0, -0.75}, f64).view({2, 3});
  torch::Tensor b = torch::tensor({0.1, -0.2, 0.3}, f64);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  OptimizerOptions o;
  o.kind = "adamw";
  o.lr = 1e-2;
  o.adam_beta1 = 0.9;
  o.adam_beta2 = 0.99;
  o.weight_decay = 0.1;  // the matrix only: a bias is not decayed
  auto adamw = MakeOptimizer({w, b}, o);
  const std::vector<std::pair<std::vector<double>, std::vector<double>>> grads = {
      {{1.0, -2.0, 0.5, 0.0, 3.0, -1.0}, {0.5, 0.5, -4.0}},
      {{0.1, 0.2, 0.3, -0.4, 0.5, -0.6}, {0.01, -0.02, 0.03}},
      {{-3.0, 1.0, 0.0, 2.0, -2.0, 1.0}, {1.0, 0.0, -1.0}},
  };
  const double norms[] = {5.634713834792322, 0.9546727187890099, 4.582575694955841};
  for (size_t step = 0; step < grads.size(); ++step) {
    w.mutable_grad() = torch::tensor(grads[step].first, f64).view({2, 3});
    b.mutable_grad() = torch::tensor(grads[step].second, f64);
    const double norm = torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{w, b}, 1.0);
    EXPECT_NEAR(norm, norms[step], 1e-12);
    adamw->Step();
  }
  const torch::Tensor w_torch =
      torch::tensor({0.482935613147209, -0.9863739433738427, 1.9680291114659025, 0.2558449664605006,
                     -0.023293684568398466, -0.7242733413445084},
                    f64);
  const torch::Tensor b_torch =
      torch::tensor({0.07441279597204135, -0.21871330512571857, 0.3230108362543696}, f64);
  EXPECT_TRUE(torch::allclose(w.detach().flatten(), w_torch, 1e-12, 1e-12)) << w;
  EXPECT_TRUE(torch::allclose(b.detach(), b_torch, 1e-12, 1e-12)) << b;
  EXPECT_EQ(adamw->StateOf(w).count("exp_avg_sq"), 1u);
}

TEST(OptimizerTest, LookaheadPullsSlowWeightsEveryKSteps) {
  torch::Tensor w = torch::zeros({3}, torch::TensorOptions(torch::kDouble).requires_grad(true));
  OptimizerOptions o;
  o.lr = 0.1;
  o.momentum = 0;
  o.lookahead = true;
  o.lookahead_k = 2;
  o.lookahead_alpha = 0.5;
  auto opt = MakeOptimizer({w}, o);
  const torch::Tensor c = torch::ones({3}, torch::kDouble);
  // Fast weights move by -0.1 per step; every 2nd step they are replaced by
  // slow + 0.5 * (fast - slow).
  const std::vector<double> expected = {-0.1, -0.1, -0.2, -0.2, -0.3};
  for (double value : expected) {
    LinearGradient(w, c);
    opt->Step();
    EXPECT_NEAR(w[0].item<double>(), value, 1e-12);
  }
}

TEST(OptimizerTest, LookaheadStateRoundTripsMidCycle) {
  OptimizerOptions o;
  o.lr = 0.1;
  o.lookahead = true;
  o.lookahead_k = 3;
  const torch::Tensor c = torch::tensor({1.0, 2.0}, torch::kDouble);
  torch::Tensor a = torch::zeros({2}, torch::TensorOptions(torch::kDouble).requires_grad(true));
  auto opt_a = MakeOptimizer({a}, o);
  for (int i = 0; i < 4; ++i) {
    LinearGradient(a, c);
    opt_a->Step();
  }
  torch::serialize::OutputArchive out;
  opt_a->Save(out);
  std::ostringstream bytes;
  out.save_to(bytes);

  torch::Tensor b = a.detach().clone().requires_grad_(true);
  auto opt_b = MakeOptimizer({b}, o);
  torch::serialize::InputArchive in;
  const std::string s = bytes.str();
  in.load_from(s.data(), s.size());
  opt_b->Load(in);
  for (int i = 0; i < 5; ++i) {
    LinearGradient(a, c);
    opt_a->Step();
    LinearGradient(b, c);
    opt_b->Step();
  }
  EXPECT_TRUE(torch::equal(a.detach(), b.detach())) << a << b;

  // State without Lookahead does not load into Lookahead, and vice versa.
  OptimizerOptions plain = o;
  plain.lookahead = false;
  auto opt_c = MakeOptimizer({b}, plain);
  torch::serialize::InputArchive again;
  again.load_from(s.data(), s.size());
  EXPECT_THROW(opt_c->Load(again), std::runtime_error);
}

TEST(LossScalerTest, BacksOffOnOverflowAndGrowsAfterCleanSteps) {
  DynamicLossScaler scaler(/*initial_scale=*/1024, /*growth_factor=*/2, /*backoff_factor=*/0.5,
                           /*growth_interval=*/3);
  torch::Tensor w = torch::ones({2}, torch::requires_grad());
  scaler.Scale((w * torch::tensor({1.0f, 2.0f})).sum()).backward();
  ASSERT_TRUE(scaler.Unscale({w}));
  EXPECT_TRUE(torch::allclose(w.grad(), torch::tensor({1.0f, 2.0f})));

  w.mutable_grad().fill_(std::numeric_limits<float>::infinity());
  EXPECT_FALSE(scaler.Unscale({w}));
  scaler.Update(true);
  EXPECT_DOUBLE_EQ(scaler.scale(), 512);
  for (int i = 0; i < 3; ++i) scaler.Update(false);
  EXPECT_DOUBLE_EQ(scaler.scale(), 1024);
  w.mutable_grad().fill_(std::nanf(""));
  EXPECT_FALSE(scaler.Unscale({w}));
}

TEST(AutocastTest, CpuAutocastRunsMatmulInBfloat16OnlyInsideTheScope) {
  ASSERT_NO_THROW(CheckAutocastSupported(torch::kCPU, Precision::kBFloat16));
  const torch::Tensor a = torch::ones({4, 4});
  {
    AutocastScope scope(torch::kCPU, Precision::kBFloat16);
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat);
  {
    AutocastScope off(torch::kCPU, Precision::kFloat32);
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat);
  }
}

// The bf16 convolution check on this CPU: a real relative error (bf16 rounds,
// so never 0), the same each call, and within the bound wherever the CPU has
// bf16 instructions (oneDNN's bf16 kernels sum in fp32). On an AVX2-only CPU
// LibTorch 1.13 measures about 19% here.
TEST(AutocastTest, Bf16ConvolutionErrorIsMeasuredOnThisCpu) {
  const double error = MeasureBf16ConvolutionError();
  std::printf("bf16 convolutions on this CPU: %.3f%% off fp32\n", 100 * error);
  EXPECT_GT(error, 1e-4);
  EXPECT_LT(error, 1.0);
  EXPECT_EQ(MeasureBf16ConvolutionError(), error);
  const CpuFeatures cpu = DetectCpuFeaturesFor("bf16", /*cuda=*/false);
  EXPECT_EQ(cpu.bf16_convolution_error, error);
  if (cpu.avx512_bf16 || cpu.amx_bf16) {
    EXPECT_LE(error, kMaxBf16ConvolutionError);
  }
  EXPECT_EQ(DetectCpuFeaturesFor("fp32", false).bf16_convolution_error, 0);
}

TEST(LossTest, LabelSmoothingMatchesItsDefinition) {
  const torch::Tensor logits = torch::tensor({{2.0f, 0.5f, -1.0f}, {0.1f, 0.2f, 0.3f}});
  const torch::Tensor labels = torch::tensor({0, 2}, torch::kLong);
  const double eps = 0.1;
  // (1 - eps) * NLL + eps * mean over classes of -log p.
  const torch::Tensor logp = torch::log_softmax(logits, 1);
  const torch::Tensor nll = -logp.gather(1, labels.unsqueeze(1)).squeeze(1);
  const torch::Tensor expected = ((1 - eps) * nll - eps * logp.mean(1)).mean();
  EXPECT_NEAR(CrossEntropy(logits, labels, eps).item<double>(), expected.item<double>(), 1e-6);
  EXPECT_NEAR(CrossEntropy(logits, labels, 0).item<double>(), nll.mean().item<double>(), 1e-6);
}

LearnerOptions SmallOptions() {
  LearnerOptions o;
  o.model_name = "resnet8";
  o.num_classes = 10;
  o.optimizer.lr = 0.05;
  o.optimizer.momentum = 0.9;
  o.optimizer.nesterov = true;
  o.optimizer.weight_decay = 5e-4;
  o.schedule.kind = ScheduleKind::kCosine;
  o.schedule.base_lr = 0.05;
  o.schedule.total_epochs = 4;
  o.schedule.warmup_epochs = 0.5;
  o.label_smoothing = 0.1;
  o.clip_grad = 5;
  o.seed = 7;
  return o;
}

std::unique_ptr<Learner> MakeLearner(uint64_t seed, LearnerOptions options = SmallOptions(),
                                     const std::string& model = "resnet8",
                                     torch::Device device = torch::kCPU) {
  SeedTorch(seed);
  return std::make_unique<Learner>(models::CreateModel(model, 10), options, device);
}

// Equal values, whatever the memory layout of either.
bool SameParameters(const Learner& a, const Learner& b) {
  const std::vector<torch::Tensor> x = a.parameters(), y = b.parameters();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!x[i].equal(y[i])) return false;
  return true;
}

struct FixedBatches {
  FixedBatches() {
    torch::manual_seed(123);
    for (int i = 0; i < 6; ++i) {
      inputs.push_back(torch::randn({8, 3, 32, 32}));
      targets.push_back(torch::randint(0, 10, {8}, torch::kLong));
    }
  }
  std::vector<torch::Tensor> inputs, targets;
};

void ExpectSameWeights(Learner& a, Learner& b) {
  auto pa = a.model().named_parameters();
  auto pb = b.model().named_parameters();
  for (const auto& item : pa) EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  auto ba = a.model().named_buffers();
  auto bb = b.model().named_buffers();
  for (const auto& item : ba) EXPECT_TRUE(torch::equal(item.value(), bb[item.key()])) << item.key();
}

// A language model's tied weights: one tensor registered in two modules (as
// nanoGPT's wte and lm_head share theirs).
class Tied : public models::Net {
 public:
  Tied() {
    weight = register_parameter("weight", torch::randn({2, 2}));
    bias = register_parameter("bias", torch::zeros({2}));
    auto head = std::make_shared<torch::nn::Module>();
    head->register_parameter("weight", weight);
    register_module("head", head);
  }
  torch::Tensor forward(torch::Tensor x) override {
    return torch::matmul(torch::tanh(torch::matmul(x, weight.t()) + bias), weight);
  }
  torch::Tensor weight, bias;
};

TEST(LearnerTest, ATiedWeightIsOneParameter) {
  Tied tied;
  ASSERT_EQ(tied.parameters().size(), 3u);  // LibTorch lists the shared weight twice
  const std::vector<torch::Tensor> unique = UniqueParameters(tied);
  ASSERT_EQ(unique.size(), 2u);
  EXPECT_TRUE(unique[0].is_same(tied.weight));
  // One SGD step moves the shared weight once, by lr x its gradient (which
  // autograd sums over both uses).
  LearnerOptions o = SmallOptions();
  o.optimizer.momentum = 0;
  o.optimizer.nesterov = false;
  o.optimizer.weight_decay = 0;
  o.schedule.kind = ScheduleKind::kConstant;
  o.schedule.warmup_epochs = 0;
  o.label_smoothing = 0;
  o.clip_grad = 0;
  o.num_classes = 2;
  o.objective = std::make_shared<Classification>(2);
  auto model = std::make_shared<Tied>();
  Learner learner(model, o, torch::kCPU);
  EXPECT_EQ(learner.parameters().size(), 2u);
  const torch::Tensor x = torch::tensor({{1.0f, 2.0f}, {-1.0f, 0.5f}});
  const torch::Tensor y = torch::tensor({0, 1}, torch::kLong);
  const torch::Tensor before = model->weight.detach().clone();
  torch::nn::functional::cross_entropy(model->forward(x), y).backward();
  const torch::Tensor grad = model->weight.grad().clone();
  model->zero_grad();
  learner.Step(x, y, 0.5);
  EXPECT_TRUE(torch::allclose(model->weight.detach(), before - o.optimizer.lr * grad, 1e-5, 1e-6))
      << model->weight << before - o.optimizer.lr * grad;
}

TEST(LearnerTest, RepeatedStepsOnOneBatchLowerItsLoss) {
  FixedBatches data;
  auto learner = MakeLearner(1);
  const double first = learner->Step(data.inputs[0], data.targets[0], 1.0).loss_sum;
  double last = first;
  for (int i = 0; i < 15; ++i) last = learner->Step(data.inputs[0], data.targets[0], 1.0).loss_sum;
  EXPECT_LT(last, first * 0.5);
}

TEST(LearnerTest, Bf16OnCpuTrainsWithFloat32Weights) {
  FixedBatches data;
  LearnerOptions o = SmallOptions();
  o.precision = Precision::kBFloat16;
  auto learner = MakeLearner(1, o);
  const StepStats first = learner->Step(data.inputs[0], data.targets[0], 1.0);
  double last = first.loss_sum;
  for (int i = 0; i < 15; ++i) last = learner->Step(data.inputs[0], data.targets[0], 1.0).loss_sum;
  EXPECT_FALSE(first.skipped);
  EXPECT_LT(last, first.loss_sum * 0.6);
  for (const auto& p : learner->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);
}

TEST(LearnerTest, Fp64TrainsInFloat64AndItsStateRestoresBitForBit) {
  FixedBatches data;
  LearnerOptions o = SmallOptions();
  o.precision = Precision::kFloat64;
  auto learner = MakeLearner(1, o);
  const StepStats first = learner->Step(data.inputs[0], data.targets[0], 1.0);
  double last = first.loss_sum;
  for (int i = 0; i < 15; ++i) last = learner->Step(data.inputs[0], data.targets[0], 1.0).loss_sum;
  EXPECT_LT(last, first.loss_sum * 0.5);
  for (const auto& p : learner->parameters()) {
    EXPECT_EQ(p.scalar_type(), torch::kDouble);
    const auto state = learner->optimizer().StateOf(p);
    ASSERT_EQ(state.count("momentum"), 1u);
    EXPECT_EQ(state.at("momentum").scalar_type(), torch::kDouble);
  }
  // Batch norm's step counter stays an integer, as Module.double() leaves it.
  for (const auto& b : learner->model().named_buffers()) {
    if (b.key().find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(b.value().scalar_type(), torch::kLong) << b.key();
    } else {
      EXPECT_EQ(b.value().scalar_type(), torch::kDouble) << b.key();
    }
  }
  auto restored = MakeLearner(2, o);
  restored->RestoreState(learner->CaptureState());
  ExpectSameWeights(*learner, *restored);
  // An fp32 run cannot take an fp64 state: the error names the tensor's type.
  auto fp32 = MakeLearner(1);
  try {
    fp32->RestoreState(learner->CaptureState());
    FAIL() << "an fp64 state must not load into an fp32 model";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("Double"), std::string::npos) << e.what();
  }
  // The trained model a checkpoint writes for Python is float32: the fp64
  // weights rounded.
  auto exported = models::CreateModel("resnet8", 10);
  LoadModelFromState(learner->CaptureState(), "resnet8", *exported);
  for (const auto& p : exported->named_parameters()) {
    EXPECT_EQ(p.value().scalar_type(), torch::kFloat) << p.key();
    EXPECT_TRUE(
        torch::equal(p.value(), learner->model().named_parameters()[p.key()].to(torch::kFloat)))
        << p.key();
  }
}

TEST(LearnerTest, Fp16OnCpuIsRefusedNamingThePrecision) {
  LearnerOptions o = SmallOptions();
  o.precision = Precision::kFloat16;
  try {
    MakeLearner(1, o);
    FAIL() << "fp16 on a CPU must be refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--precision=fp16"), std::string::npos) << e.what();
  }
}

TEST(LearnerTest, ChannelsLastTrainsLikeContiguousAndItsStateRestoresEitherWay) {
  FixedBatches data;
  LearnerOptions o = SmallOptions();
  auto contiguous = MakeLearner(1, o);
  o.channels_last = true;
  auto channels_last = MakeLearner(1, o);
  int four_d = 0;
  for (const auto& p : channels_last->parameters()) {
    if (p.dim() != 4) continue;
    ++four_d;
    EXPECT_TRUE(p.is_contiguous(torch::MemoryFormat::ChannelsLast));
  }
  EXPECT_GT(four_d, 0);
  // Same seed, same data: the same model, whatever its memory layout.
  EXPECT_TRUE(SameParameters(*contiguous, *channels_last));
  for (int i = 0; i < 5; ++i) {
    const StepStats a = contiguous->Step(data.inputs[0], data.targets[0], 1.0);
    const StepStats b = channels_last->Step(data.inputs[0], data.targets[0], 1.0);
    // Other convolution kernels sum in another order: close, not bit-equal.
    EXPECT_NEAR(a.loss_sum / a.count, b.loss_sum / b.count, 1e-3) << "step " << i;
  }
  for (const auto& p : channels_last->parameters()) {
    if (p.dim() == 4) EXPECT_TRUE(p.is_contiguous(torch::MemoryFormat::ChannelsLast));
  }
  // A channels-last worker's state restores into a contiguous one and back:
  // elastic workers on different CPUs may choose differently.
  o.channels_last = false;
  auto restored = MakeLearner(2, o);
  restored->RestoreState(channels_last->CaptureState());
  EXPECT_TRUE(SameParameters(*restored, *channels_last));
  o.channels_last = true;
  auto back = MakeLearner(3, o);
  back->RestoreState(restored->CaptureState());
  EXPECT_TRUE(SameParameters(*back, *restored));
  for (const auto& p : back->parameters()) {
    if (p.dim() == 4) EXPECT_TRUE(p.is_contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

TEST(DeviceTest, SpecsResolveToWhatThisMachineHas) {
  EXPECT_EQ(ResolveDevice("cpu", 3), torch::Device(torch::kCPU));
  EXPECT_THROW(ResolveDevice("gpu", 0), std::runtime_error);
  const int64_t gpus = static_cast<int64_t>(torch::cuda::device_count());
  if (gpus == 0) {
    EXPECT_EQ(ResolveDevice("auto", 0), torch::Device(torch::kCPU));
    try {
      ResolveDevice("cuda", 0);
      FAIL() << "--device=cuda without a GPU must fail";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
    }
  } else {
    EXPECT_EQ(ResolveDevice("auto", gpus + 1), torch::Device(torch::kCUDA, 1 % gpus));
    EXPECT_EQ(ResolveDevice("cuda:0", 5), torch::Device(torch::kCUDA, 0));
    EXPECT_THROW(ResolveDevice("cuda:" + std::to_string(gpus), 0), std::runtime_error);
  }
}

// The GPU cases run where LibTorch has CUDA and a device (--config=cuda on a
// GPU machine, docs/operations.md); elsewhere they skip, saying why.
#define SKIP_WITHOUT_CUDA()         \
  if (!torch::cuda::is_available()) \
  GTEST_SKIP() << "skipped, needs a CUDA LibTorch and a GPU (--config=cuda on a GPU machine)"

TEST(LearnerTest, Fp16OnCudaTrainsWithLossScaling) {
  SKIP_WITHOUT_CUDA();
  FixedBatches data;
  LearnerOptions o = SmallOptions();
  o.precision = Precision::kFloat16;
  auto learner = MakeLearner(1, o, "resnet8", torch::Device(torch::kCUDA, 0));
  const StepStats first = learner->Step(data.inputs[0], data.targets[0], 1.0);
  double last = first.loss_sum;
  int skipped = first.skipped ? 1 : 0;
  for (int i = 0; i < 15; ++i) {
    const StepStats stats = learner->Step(data.inputs[0], data.targets[0], 1.0);
    last = stats.loss_sum;
    skipped += stats.skipped ? 1 : 0;
  }
  EXPECT_LT(skipped, 4) << "the loss scale should settle after a few overflow steps";
  EXPECT_LT(last, first.loss_sum * 0.6);
  for (const auto& p : learner->parameters()) {
    EXPECT_TRUE(p.is_cuda());
    EXPECT_EQ(p.scalar_type(), torch::kFloat);  // master weights stay float32
  }
}

TEST(LearnerTest, StateCapturedOnTheGpuRestoresOnTheCpuAndBack) {
  SKIP_WITHOUT_CUDA();
  FixedBatches data;
  LearnerOptions o = SmallOptions();  // SGD with momentum: optimizer state on the device
  auto gpu = MakeLearner(1, o, "resnet8", torch::Device(torch::kCUDA, 0));
  for (int i = 0; i < 3; ++i) gpu->Step(data.inputs[i], data.targets[i], 0.1 * (i + 1));
  auto cpu = MakeLearner(99, o);
  cpu->RestoreState(gpu->CaptureState());
  auto params = cpu->model().named_parameters();
  for (const auto& item : gpu->model().named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value().cpu(), params[item.key()])) << item.key();
  }
  auto back = MakeLearner(5, o, "resnet8", torch::Device(torch::kCUDA, 0));
  back->RestoreState(cpu->CaptureState());
  const double a = gpu->Step(data.inputs[3], data.targets[3], 0.4).loss_sum;
  const double b = back->Step(data.inputs[3], data.targets[3], 0.4).loss_sum;
  EXPECT_NEAR(a, b, 1e-3 * std::abs(a));
}

// Records the gradient norm the hook sees (where the distributed trainer
// averages gradients across workers).
class RecordingHook : public GradientHook {
 public:
  void AfterBackward(const std::vector<torch::Tensor>& params) override {
    ++calls;
    std::vector<torch::Tensor> grads;
    for (const auto& p : params) grads.push_back(p.grad().flatten());
    norm = torch::cat(grads).norm().item<double>();
  }
  int calls = 0;
  double norm = 0;
};

TEST(LearnerTest, HookSeesGradientsAndClippingBoundsTheUpdate) {
  FixedBatches data;
  LearnerOptions o = SmallOptions();
  o.optimizer.momentum = 0;
  o.optimizer.nesterov = false;
  o.optimizer.weight_decay = 0;
  o.schedule.kind = ScheduleKind::kConstant;
  o.schedule.warmup_epochs = 0;
  o.schedule.base_lr = 1.0;
  o.clip_grad = 1e-3;
  auto learner = MakeLearner(1, o);
  std::vector<torch::Tensor> before;
  for (const auto& p : learner->parameters()) before.push_back(p.detach().clone());
  RecordingHook hook;
  const StepStats stats = learner->Step(data.inputs[0], data.targets[0], 0.5, &hook);
  EXPECT_EQ(hook.calls, 1);
  EXPECT_GT(hook.norm, 1e-2);  // unclipped gradients are far larger than the clip
  EXPECT_DOUBLE_EQ(stats.lr, 1.0);
  std::vector<torch::Tensor> moved;
  for (size_t i = 0; i < before.size(); ++i)
    moved.push_back((learner->parameters()[i].detach() - before[i]).flatten());
  // lr 1, plain SGD: the update is the clipped gradient, of norm clip_grad.
  EXPECT_NEAR(torch::cat(moved).norm().item<double>(), 1e-3, 1e-5);
}

// Records the order of the hook's calls around the micro-batches' backward passes.
class OrderHook : public GradientHook {
 public:
  void BeforeBackward(bool last) override { calls += last ? "L" : "b"; }
  void AfterBackward(const std::vector<torch::Tensor>&) override { calls += "A"; }
  std::string calls;
};

// Gradient accumulation: micro-batches weighted by their share of the samples
// give the step of one batch holding them all (a model without batch norm, so
// that the split changes nothing but the order of float sums).
TEST(LearnerTest, WeightedMicroBatchesMatchOneBatch) {
  struct Mlp : models::Net {
    Mlp() { fc = register_module("fc", torch::nn::Linear(3 * 32 * 32, 10)); }
    torch::Tensor forward(torch::Tensor x) override { return fc(x.flatten(1)); }
    torch::nn::Linear fc{nullptr};
  };
  FixedBatches data;
  LearnerOptions o = SmallOptions();
  o.model_name = "mlp";
  SeedTorch(5);
  Learner whole(std::make_shared<Mlp>(), o, torch::kCPU);
  SeedTorch(5);
  Learner split(std::make_shared<Mlp>(), o, torch::kCPU);
  OrderHook order;
  for (int i = 0; i < 3; ++i) {
    const StepStats a = whole.Step(data.inputs[i], data.targets[i], 0.1 * (i + 1));
    const std::vector<MicroBatch> micro = {
        {data.inputs[i].narrow(0, 0, 3), data.targets[i].narrow(0, 0, 3), 3.0 / 8},
        {data.inputs[i].narrow(0, 3, 5), data.targets[i].narrow(0, 3, 5), 5.0 / 8}};
    const StepStats b = split.Step(micro, 0.1 * (i + 1), i == 0 ? &order : nullptr);
    EXPECT_EQ(b.count, 8);
    EXPECT_EQ(b.metric_sum, a.metric_sum);
    EXPECT_NEAR(b.loss_sum, a.loss_sum, 1e-4);
  }
  EXPECT_EQ(order.calls, "bLA");
  for (size_t i = 0; i < whole.parameters().size(); ++i) {
    EXPECT_TRUE(torch::allclose(whole.parameters()[i], split.parameters()[i], 1e-5, 1e-6))
        << "parameter " << i;
  }
  EXPECT_THROW(split.Step(std::vector<MicroBatch>{}, 0.5), std::invalid_argument);
}

TEST(LearnerTest, WarmupSetsTheStepLearningRate) {
  FixedBatches data;
  auto learner = MakeLearner(1);
  EXPECT_NEAR(learner->Step(data.inputs[0], data.targets[0], 0.25).lr, 0.025, 1e-12);
  EXPECT_NEAR(learner->Step(data.inputs[0], data.targets[0], 0.5).lr, 0.05, 1e-12);
}

// The step warm-up counts the steps of the learner's progress, which the loop
// advances and commits and checkpoints carry, so a restart resumes its ramp.
TEST(LearnerTest, WarmupStepsCountTheProgressSteps) {
  FixedBatches data;
  LearnerOptions o = SmallOptions();
  o.schedule.kind = ScheduleKind::kConstant;
  o.schedule.warmup_epochs = 0;
  o.schedule.warmup_steps = 4;
  auto learner = MakeLearner(1, o);
  EXPECT_NEAR(learner->Step(data.inputs[0], data.targets[0], 0.01).lr, 0.05 / 4, 1e-12);
  learner->progress().step = 2;  // as after a restore at step 2
  EXPECT_NEAR(learner->Step(data.inputs[0], data.targets[0], 0.01).lr, 0.05 * 3 / 4, 1e-12);
  learner->progress().step = 40;
  EXPECT_NEAR(learner->Step(data.inputs[0], data.targets[0], 0.01).lr, 0.05, 1e-12);
}

TEST(LearnerTest, CaptureRestoreContinuesBitForBit) {
  FixedBatches data;
  LearnerOptions o = SmallOptions();
  o.optimizer.lookahead = true;
  o.optimizer.lookahead_k = 2;
  auto a = MakeLearner(1, o);
  for (int i = 0; i < 3; ++i) a->Step(data.inputs[i], data.targets[i], 0.1 * (i + 1));
  a->progress() = {1, 24, 3};
  const std::string state = a->CaptureState();
  // The RNG state is part of it: draws after the restore repeat.
  const torch::Tensor draw_a = torch::rand({4});

  auto b = MakeLearner(99, o);  // other initial weights, all overwritten
  b->RestoreState(state);
  const torch::Tensor draw_b = torch::rand({4});
  EXPECT_TRUE(torch::equal(draw_a, draw_b));
  EXPECT_EQ(b->progress().epoch, 1);
  EXPECT_EQ(b->progress().position, 24);
  EXPECT_EQ(b->progress().step, 3);
  EXPECT_EQ(b->seed(), 7u);
  ExpectSameWeights(*a, *b);
  for (int i = 3; i < 6; ++i) {
    a->Step(data.inputs[i], data.targets[i], 0.1 * (i + 1));
    b->Step(data.inputs[i], data.targets[i], 0.1 * (i + 1));
  }
  ExpectSameWeights(*a, *b);
  EXPECT_EQ(a->CaptureState().size(), b->CaptureState().size());
}

// A worker warms its learner up before it joins, then restores the state its
// generation sends: from then on it trains bit for bit as one that was not
// warmed up. WarmUp itself leaves the parameters and the progress as they were
// and no gradients (an optimizer skips a parameter without one).
TEST(LearnerTest, AWarmedUpLearnerRestoredFromAStateTrainsAsOneThatWasNot) {
  FixedBatches data;
  auto a = MakeLearner(1);
  auto b = MakeLearner(1);
  const std::string state = a->CaptureState();
  b->WarmUp(data.inputs[0], data.targets[0]);
  EXPECT_TRUE(SameParameters(*a, *b));
  for (const torch::Tensor& p : b->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_EQ(b->progress().step, 0);
  // Batch norm's running statistics moved: hence the restore.
  bool moved = false;
  auto buffers_b = b->model().named_buffers();
  for (const auto& item : a->model().named_buffers())
    moved = moved || !torch::equal(item.value(), buffers_b[item.key()]);
  EXPECT_TRUE(moved);
  b->RestoreState(state);
  for (int i = 1; i < 6; ++i) {
    a->Step(data.inputs[i], data.targets[i], 0.1 * i);
    b->Step(data.inputs[i], data.targets[i], 0.1 * i);
    ExpectSameWeights(*a, *b);  // momentum too: it moves the next step's weights
  }
}

// A receiver bounds the state a peer announces by its own fresh learner's
// StateSizeLimit: the largest state training produces (Adam's two moments
// plus Lookahead's slow weights) must fit under it.
TEST(LearnerTest, TheStateOfATrainedLearnerFitsAFreshOnesSizeLimit) {
  FixedBatches data;
  LearnerOptions o = SmallOptions();
  o.optimizer.kind = "adam";
  o.optimizer.lookahead = true;
  o.optimizer.lookahead_k = 2;
  auto trained = MakeLearner(1, o);
  for (int i = 0; i < 3; ++i) trained->Step(data.inputs[i], data.targets[i], 0.1);
  auto fresh = MakeLearner(2, o);
  const size_t fresh_bytes = fresh->CaptureState().size();
  const size_t trained_bytes = trained->CaptureState().size();
  std::printf("state of a fresh learner %zu bytes, of a trained one %zu (x%.2f), limit %llu\n",
              fresh_bytes, trained_bytes, static_cast<double>(trained_bytes) / fresh_bytes,
              static_cast<unsigned long long>(fresh->StateSizeLimit()));
  // Without the 64 MiB of slack, which would hide any factor at this size.
  EXPECT_LE(trained_bytes, 4 * fresh_bytes);
  EXPECT_EQ(fresh->StateSizeLimit(), 4 * fresh_bytes + (uint64_t{64} << 20));
}

std::string RestoreError(Learner& learner, const std::string& state) {
  try {
    learner.RestoreState(state);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(LearnerTest, RestoreRejectsStateThatDoesNotFit) {
  auto source = MakeLearner(1);
  const std::string state = source->CaptureState();

  LearnerOptions adam = SmallOptions();
  adam.optimizer.kind = "adam";
  adam.optimizer.nesterov = false;
  auto other_optimizer = MakeLearner(1, adam);
  EXPECT_NE(RestoreError(*other_optimizer, state).find("optimizer state is for 'sgd'"),
            std::string::npos);

  LearnerOptions renamed = SmallOptions();
  renamed.model_name = "resnet18";
  auto other_model = MakeLearner(1, renamed, "resnet18");
  EXPECT_NE(RestoreError(*other_model, state).find("for model 'resnet8'"), std::string::npos);

  LearnerOptions classes = SmallOptions();
  classes.num_classes = 7;
  auto other_classes = MakeLearner(1, classes);
  EXPECT_NE(RestoreError(*other_classes, state).find("has 10 classes, this data set has 7"),
            std::string::npos);

  LearnerOptions step = SmallOptions();
  step.schedule.kind = ScheduleKind::kStep;
  auto other_schedule = MakeLearner(1, step);
  EXPECT_NE(RestoreError(*other_schedule, state).find("different --schedule"), std::string::npos);

  auto target = MakeLearner(1);
  EXPECT_NE(RestoreError(*target, state.substr(0, state.size() / 2)).find("truncated"),
            std::string::npos);
  EXPECT_NE(RestoreError(*target, "garbage").find("truncated"), std::string::npos);
}

}  // namespace
}  // namespace elastic::trainer
