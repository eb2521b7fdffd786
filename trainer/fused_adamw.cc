#include "trainer/fused_adamw.h"

#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

namespace elastic::trainer {
namespace {

#if defined(__x86_64__)
#define ELASTIC_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ELASTIC_CPU_CLONES
#endif

// Each line is one of LibTorch's operations, in its order, in float32 with
// the scalars cast to float as ATen does. The results agree with LibTorch's to
// float rounding, not bit for bit: ATen's vectorised `add_` with an alpha
// uses a fused multiply-add, its scalar tail does not.
ELASTIC_CPU_CLONES
void UpdateLoop(float* __restrict param, const float* __restrict grad, float* __restrict exp_avg,
                float* __restrict exp_avg_sq, int64_t n, float decay, float beta1,
                float one_minus_beta1, float beta2, float one_minus_beta2, float root_correction2,
                float eps, float neg_step_size) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float p = param[i] * decay;                                 // p.mul_(1 - lr * wd)
    const float m = exp_avg[i] * beta1 + one_minus_beta1 * g;         // mul_(b1).add_(g, 1 - b1)
    const float v = exp_avg_sq[i] * beta2 + one_minus_beta2 * g * g;  // mul_(b2).addcmul_(g, g)
    const float denom = std::sqrt(v) / root_correction2 + eps;        // sqrt() / c2 + eps
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = p + neg_step_size * m / denom;  // addcdiv_(m, denom, -s)
  }
}

bool Fusable(const torch::Tensor& p, const torch::Tensor& grad, const torch::Tensor& exp_avg,
             const torch::Tensor& exp_avg_sq) {
  for (const torch::Tensor* t : {&p, &grad, &exp_avg, &exp_avg_sq}) {
    if (!t->device().is_cpu() || t->scalar_type() != torch::kFloat || !t->is_contiguous() ||
        t->numel() != p.numel())
      return false;
  }
  return true;
}

// LibTorch's own AdamW update (torch/csrc/api/src/optim/adamw.cpp), for what
// the loop does not take.
void TorchUpdate(torch::Tensor& p, const torch::Tensor& grad, torch::optim::AdamWParamState& state,
                 const torch::optim::AdamWOptions& options) {
  const auto [beta1, beta2] = options.betas();
  if (options.weight_decay() != 0) p.mul_(1 - options.lr() * options.weight_decay());
  const double correction1 = 1 - std::pow(beta1, state.step());
  const double correction2 = 1 - std::pow(beta2, state.step());
  state.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
  state.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  const torch::Tensor denom =
      (state.exp_avg_sq().sqrt() / std::sqrt(correction2)).add_(options.eps());
  p.addcdiv_(state.exp_avg(), denom, -options.lr() / correction1);
}

}  // namespace

void AdamWUpdate(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                 double lr, double beta1, double beta2, double eps, double weight_decay,
                 int64_t step) {
  const double correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  UpdateLoop(param, grad, exp_avg, exp_avg_sq, n, static_cast<float>(1 - lr * weight_decay),
             static_cast<float>(beta1), static_cast<float>(1 - beta1), static_cast<float>(beta2),
             static_cast<float>(1 - beta2), static_cast<float>(std::sqrt(correction2)),
             static_cast<float>(eps), static_cast<float>(-lr / correction1));
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (options.amsgrad()) throw std::invalid_argument("FusedAdamW: amsgrad is not supported");
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& grad = p.grad();
      if (grad.is_sparse()) throw std::invalid_argument("AdamW does not support sparse gradients");
      // LibTorch keys a parameter's state by its TensorImpl's address.
      std::unique_ptr<torch::optim::OptimizerParamState>& slot =
          state_[c10::guts::to_string(p.unsafeGetTensorImpl())];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*slot);
      state.step(state.step() + 1);
      if (Fusable(p, grad, state.exp_avg(), state.exp_avg_sq())) {
        const auto [beta1, beta2] = options.betas();
        AdamWUpdate(p.data_ptr<float>(), grad.data_ptr<float>(), state.exp_avg().data_ptr<float>(),
                    state.exp_avg_sq().data_ptr<float>(), p.numel(), options.lr(), beta1, beta2,
                    options.eps(), options.weight_decay(), state.step());
      } else {
        TorchUpdate(p, grad, state, options);
      }
    }
  }
  return loss;
}

}  // namespace elastic::trainer
