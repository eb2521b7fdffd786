#include "trainer/fused_adamw.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <sstream>
#include <vector>

namespace elastic::trainer {
namespace {

// Shapes a GPT has (an embedding, a square matrix, a bias) and two that end
// off any vector width (the loop's scalar tail) or are not contiguous (the
// fallback to LibTorch's operations).
struct Params {
  std::vector<torch::Tensor> decayed, other;
  std::vector<torch::Tensor> all() const {
    std::vector<torch::Tensor> v = decayed;
    v.insert(v.end(), other.begin(), other.end());
    return v;
  }
};

Params MakeParams(torch::ScalarType dtype) {
  torch::manual_seed(7);
  const auto o = torch::TensorOptions(dtype);
  Params p;
  p.decayed = {torch::randn({65, 128}, o), torch::randn({37, 29}, o),
               torch::randn({12, 5}, o).t().detach()};  // not contiguous
  p.other = {torch::randn({1037}, o), torch::randn({128}, o)};
  for (torch::Tensor& t : p.decayed) t.set_requires_grad(true);
  for (torch::Tensor& t : p.other) t.set_requires_grad(true);
  return p;
}

Params Clone(const Params& from) {
  Params p;
  for (const auto& t : from.decayed) p.decayed.push_back(t.detach().clone().requires_grad_(true));
  for (const auto& t : from.other) p.other.push_back(t.detach().clone().requires_grad_(true));
  return p;
}

// nanoGPT's two groups: decay for matrices, none for vectors.
template <typename Optimizer>
std::unique_ptr<Optimizer> Make(const Params& p) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (double decay : {0.1, 0.0}) {
    auto options = std::make_unique<torch::optim::AdamWOptions>(1e-3);
    options->betas({0.9, 0.99}).weight_decay(decay);
    groups.emplace_back(decay > 0 ? p.decayed : p.other, std::move(options));
  }
  return std::make_unique<Optimizer>(std::move(groups), torch::optim::AdamWOptions(1e-3));
}

// The same gradients into both sets, then a step of each; the learning rate
// changes between steps as a schedule changes it.
template <typename A, typename B>
void StepBoth(A& a, const Params& pa, B& b, const Params& pb, int step) {
  const std::vector<torch::Tensor> ta = pa.all(), tb = pb.all();
  for (size_t i = 0; i < ta.size(); ++i) {
    const torch::Tensor g = torch::randn_like(ta[i]) * (0.1 * (i + 1));
    ta[i].mutable_grad() = g.clone();
    tb[i].mutable_grad() = g.clone();
  }
  for (auto* groups : {&a.param_groups(), &b.param_groups()})
    for (auto& group : *groups)
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(1e-3 * (1 + step % 3));
  a.step();
  b.step();
}

void ExpectClose(const Params& a, const Params& b, double rtol, double atol) {
  const std::vector<torch::Tensor> ta = a.all(), tb = b.all();
  for (size_t i = 0; i < ta.size(); ++i) {
    EXPECT_TRUE(torch::allclose(ta[i], tb[i], rtol, atol))
        << "parameter " << i << ": largest difference "
        << (ta[i] - tb[i]).abs().max().item<double>();
  }
}

TEST(FusedAdamWTest, Float32MatchesLibTorchsAdamWToRounding) {
  const Params fused_params = MakeParams(torch::kFloat);
  const Params torch_params = Clone(fused_params);
  auto fused = Make<FusedAdamW>(fused_params);
  auto reference = Make<torch::optim::AdamW>(torch_params);
  for (int step = 0; step < 20; ++step)
    StepBoth(*fused, fused_params, *reference, torch_params, step);
  ExpectClose(fused_params, torch_params, 1e-5, 1e-6);
  // The moments too: they travel in checkpoints and commits.
  for (const torch::Tensor& p : fused_params.all()) {
    const auto key = c10::guts::to_string(p.unsafeGetTensorImpl());
    EXPECT_EQ(static_cast<torch::optim::AdamWParamState&>(*fused->state().at(key)).step(), 20);
  }
}

TEST(FusedAdamWTest, TheStepMovesTheParameters) {
  // A test that cannot fail if the loop did nothing would be worthless: the
  // parameters must move, by about lr a step (Adam's normalised update).
  const Params p = MakeParams(torch::kFloat);
  const torch::Tensor before = p.decayed[0].detach().clone();
  auto fused = Make<FusedAdamW>(p);
  p.decayed[0].mutable_grad() = torch::ones_like(p.decayed[0]);
  fused->step();
  const double moved = (p.decayed[0].detach() - before).abs().mean().item<double>();
  EXPECT_NEAR(moved, 1e-3, 2e-4);
}

TEST(FusedAdamWTest, Float64TakesLibTorchsOperationsExactly) {
  const Params fused_params = MakeParams(torch::kDouble);
  const Params torch_params = Clone(fused_params);
  auto fused = Make<FusedAdamW>(fused_params);
  auto reference = Make<torch::optim::AdamW>(torch_params);
  for (int step = 0; step < 5; ++step)
    StepBoth(*fused, fused_params, *reference, torch_params, step);
  ExpectClose(fused_params, torch_params, 0, 0);
}

TEST(FusedAdamWTest, ArchivesLoadIntoLibTorchsAdamWAndBack) {
  const Params fused_params = MakeParams(torch::kFloat);
  const Params torch_params = Clone(fused_params);
  auto fused = Make<FusedAdamW>(fused_params);
  auto reference = Make<torch::optim::AdamW>(torch_params);
  for (int step = 0; step < 3; ++step)
    StepBoth(*fused, fused_params, *reference, torch_params, step);

  // The fused one's state into a LibTorch AdamW over copies of its parameters.
  std::stringstream bytes;
  {
    torch::serialize::OutputArchive archive;
    fused->save(archive);
    archive.save_to(bytes);
  }
  const Params restored_params = Clone(fused_params);
  auto restored = Make<torch::optim::AdamW>(restored_params);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  restored->load(in);
  // Both go on from the same state and gradients: the same parameters.
  StepBoth(*fused, fused_params, *restored, restored_params, 3);
  ExpectClose(fused_params, restored_params, 1e-5, 1e-6);
}

}  // namespace
}  // namespace elastic::trainer
