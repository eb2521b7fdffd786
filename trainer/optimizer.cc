#include "trainer/optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <stdexcept>
#include <utility>

#include "trainer/fused_adamw.h"

namespace elastic::trainer {
namespace {

std::map<std::string, torch::Tensor> NamedState(const torch::optim::OptimizerParamState& state) {
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    return {{"momentum", sgd->momentum_buffer()}};
  }
  if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    return {{"exp_avg", adam->exp_avg()}, {"exp_avg_sq", adam->exp_avg_sq()}};
  }
  if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) {
    return {{"exp_avg", adamw->exp_avg()}, {"exp_avg_sq", adamw->exp_avg_sq()}};
  }
  return {};
}

// A LibTorch optimizer behind our interface. `kind` is written into the
// archive so that loading SGD state into Adam fails with a clear message.
template <typename TorchOptimizer, typename TorchOptions>
class TorchOptimizerAdapter : public Optimizer {
 public:
  // `params`: the tensors, or param groups with options of their own.
  template <typename Params>
  TorchOptimizerAdapter(std::string kind, Params params, TorchOptions options)
      : kind_(std::move(kind)), optimizer_(std::move(params), options) {}

  void ZeroGrad() override { optimizer_.zero_grad(); }
  void Step() override { optimizer_.step(); }
  void SetLearningRate(double lr) override {
    for (auto& group : optimizer_.param_groups())
      static_cast<TorchOptions&>(group.options()).lr(lr);
  }
  void Save(torch::serialize::OutputArchive& archive) const override {
    archive.write("kind", c10::IValue(kind_));
    torch::serialize::OutputArchive inner(archive.compilation_unit());
    optimizer_.save(inner);
    archive.write("torch", inner);
  }
  void Load(torch::serialize::InputArchive& archive) override {
    c10::IValue kind;
    archive.read("kind", kind);
    if (!kind.isString() || kind.toStringRef() != kind_) {
      throw std::runtime_error("optimizer state is for '" +
                               (kind.isString() ? kind.toStringRef() : std::string("?")) +
                               "', this run uses '" + kind_ + "'");
    }
    torch::serialize::InputArchive inner;
    archive.read("torch", inner);
    optimizer_.load(inner);
  }
  std::map<std::string, torch::Tensor> StateOf(const torch::Tensor& param) const override {
    // LibTorch keys a parameter's state by the address of its TensorImpl.
    const auto& states = optimizer_.state();
    const auto it = states.find(c10::guts::to_string(param.unsafeGetTensorImpl()));
    return it == states.end() ? std::map<std::string, torch::Tensor>{} : NamedState(*it->second);
  }

 private:
  std::string kind_;
  TorchOptimizer optimizer_;
};

// AdamW's two groups, as nanoGPT's configure_optimizers makes them: weight
// decay for the matrices and embeddings (2 dimensions or more), none for
// biases and normalisation gains. Empty groups are left out.
std::vector<torch::optim::OptimizerParamGroup> DecayGroups(const std::vector<torch::Tensor>& params,
                                                           const OptimizerOptions& o) {
  std::vector<torch::Tensor> decayed, other;
  for (const torch::Tensor& p : params) (p.dim() >= 2 ? decayed : other).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (auto* group : {&decayed, &other}) {
    if (group->empty()) continue;
    auto options = std::make_unique<torch::optim::AdamWOptions>(o.lr);
    options->betas({o.adam_beta1, o.adam_beta2});
    options->weight_decay(group == &decayed ? o.weight_decay : 0.0);
    groups.emplace_back(*group, std::move(options));
  }
  return groups;
}

}  // namespace

std::unique_ptr<Optimizer> MakeOptimizer(const std::vector<torch::Tensor>& params,
                                         const OptimizerOptions& o) {
  std::unique_ptr<Optimizer> base;
  if (o.kind == "sgd") {
    base = std::make_unique<TorchOptimizerAdapter<torch::optim::SGD, torch::optim::SGDOptions>>(
        "sgd", params,
        torch::optim::SGDOptions(o.lr)
            .momentum(o.momentum)
            .nesterov(o.nesterov)
            .weight_decay(o.weight_decay));
  } else if (o.kind == "adam") {
    base = std::make_unique<TorchOptimizerAdapter<torch::optim::Adam, torch::optim::AdamOptions>>(
        "adam", params,
        torch::optim::AdamOptions(o.lr)
            .betas({o.adam_beta1, o.adam_beta2})
            .weight_decay(o.weight_decay));
  } else if (o.kind == "adamw") {
    base = std::make_unique<TorchOptimizerAdapter<FusedAdamW, torch::optim::AdamWOptions>>(
        "adamw", DecayGroups(params, o),
        torch::optim::AdamWOptions(o.lr).betas({o.adam_beta1, o.adam_beta2}));
  } else {
    throw std::invalid_argument("unknown optimizer '" + o.kind + "' (sgd, adam, adamw)");
  }
  if (!o.lookahead) return base;
  return std::make_unique<Lookahead>(std::move(base), params, o.lookahead_k, o.lookahead_alpha);
}

Lookahead::Lookahead(std::unique_ptr<Optimizer> inner, std::vector<torch::Tensor> params, int64_t k,
                     double alpha)
    : inner_(std::move(inner)), params_(std::move(params)), k_(k), alpha_(alpha) {
  if (k_ < 1) throw std::invalid_argument("lookahead: k must be >= 1");
  if (!(alpha_ > 0 && alpha_ <= 1)) throw std::invalid_argument("lookahead: alpha not in (0, 1]");
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : params_) slow_.push_back(p.detach().clone());
}

void Lookahead::Step() {
  inner_->Step();
  if (++fast_steps_ % k_ != 0) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    slow_[i].add_(params_[i] - slow_[i], alpha_);
    params_[i].copy_(slow_[i]);
  }
}

std::map<std::string, torch::Tensor> Lookahead::StateOf(const torch::Tensor& param) const {
  std::map<std::string, torch::Tensor> state = inner_->StateOf(param);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].is_same(param)) state["slow"] = slow_[i];
  }
  return state;
}

void Lookahead::Save(torch::serialize::OutputArchive& archive) const {
  archive.write("kind", c10::IValue(std::string("lookahead")));
  archive.write("fast_steps", torch::tensor(fast_steps_));
  archive.write("k", torch::tensor(k_));
  for (size_t i = 0; i < slow_.size(); ++i)
    archive.write("slow/" + std::to_string(i), slow_[i], /*is_buffer=*/true);
  torch::serialize::OutputArchive inner(archive.compilation_unit());
  inner_->Save(inner);
  archive.write("inner", inner);
}

void Lookahead::Load(torch::serialize::InputArchive& archive) {
  c10::IValue kind;
  archive.read("kind", kind);
  if (!kind.isString() || kind.toStringRef() != "lookahead")
    throw std::runtime_error("optimizer state has no Lookahead, this run uses --lookahead");
  torch::Tensor fast_steps, k;
  archive.read("fast_steps", fast_steps);
  archive.read("k", k);
  if (k.item<int64_t>() != k_) {
    throw std::runtime_error(
        "optimizer state has lookahead k=" + std::to_string(k.item<int64_t>()) +
        ", this run uses k=" + std::to_string(k_));
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < slow_.size(); ++i) {
    torch::Tensor saved;
    archive.read("slow/" + std::to_string(i), saved, /*is_buffer=*/true);
    if (!saved.sizes().equals(slow_[i].sizes()))
      throw std::runtime_error("lookahead slow weight " + std::to_string(i) + " has another shape");
    slow_[i].copy_(saved);
  }
  torch::serialize::InputArchive inner;
  archive.read("inner", inner);
  inner_->Load(inner);
  fast_steps_ = fast_steps.item<int64_t>();
}

}  // namespace elastic::trainer
