#include "models/batch_norm_act.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

#include "models/batch_norm_kernels.h"

namespace elastic::models {
namespace {

namespace autograd = torch::autograd;

std::atomic<bool> fused_enabled{true};

// Rows per thread's share below which splitting costs more than it saves.
constexpr int64_t kMinRowsPerChunk = 1024;

// The rows of a channels-last tensor split into one contiguous range per
// chunk; each chunk sums into its own per-channel slots, combined in order
// afterwards, so the result does not depend on thread scheduling.
struct RowSplit {
  int64_t rows;
  int64_t channels;
  int64_t chunks;

  RowSplit(int64_t rows, int64_t channels)
      : rows(rows),
        channels(channels),
        chunks(std::clamp<int64_t>(rows / kMinRowsPerChunk, 1, at::get_num_threads())) {}

  int64_t First(int64_t chunk) const { return rows * chunk / chunks; }
  kernels::Rows Range(int64_t chunk) const { return {First(chunk + 1) - First(chunk), channels}; }
  int64_t Offset(int64_t chunk) const { return First(chunk) * channels; }

  // Runs body(chunk) for every chunk, on ATen's threads.
  template <typename Body>
  void ForEach(const Body& body) const {
    at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t chunk = begin; chunk < end; ++chunk) body(chunk);
    });
  }

  // Two per-channel sums per chunk, added up across chunks.
  struct Sums {
    std::vector<double> first, second;
  };
  template <typename Body>
  Sums Sum(const Body& body) const {
    std::vector<double> first(chunks * channels, 0.0), second(chunks * channels, 0.0);
    ForEach([&](int64_t chunk) {
      body(chunk, first.data() + chunk * channels, second.data() + chunk * channels);
    });
    Sums total{std::vector<double>(channels, 0.0), std::vector<double>(channels, 0.0)};
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      for (int64_t c = 0; c < channels; ++c) {
        total.first[c] += first[chunk * channels + c];
        total.second[c] += second[chunk * channels + c];
      }
    }
    return total;
  }
};

// bfloat16 tensors go to the kernels as their bits.
template <typename T>
T* Data(const torch::Tensor& t) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
  } else {
    return t.data_ptr<T>();
  }
}

template <typename T>
const T* DataOrNull(const c10::optional<torch::Tensor>& t) {
  return t.has_value() && t->defined() ? Data<T>(*t) : nullptr;
}

torch::Tensor FloatTensor(const std::vector<float>& values) {
  return torch::tensor(values, torch::kFloat32);
}

struct Statistics {
  std::vector<float> mean, invstd;
  std::vector<double> variance;  // biased
};

template <typename T>
Statistics BatchStatistics(const torch::Tensor& x, const RowSplit& split, double eps) {
  const T* data = Data<T>(x);
  std::vector<float> origin(split.channels);
  for (int64_t c = 0; c < split.channels; ++c) {
    if constexpr (std::is_same_v<T, uint16_t>) {
      origin[c] = kernels::Bf16ToFloat(data[c]);
    } else {
      origin[c] = data[c];
    }
  }
  const auto sums = split.Sum([&](int64_t chunk, double* sum, double* square) {
    kernels::SumShifted(data + split.Offset(chunk), split.Range(chunk), origin.data(), sum, square);
  });
  Statistics stats{std::vector<float>(split.channels), std::vector<float>(split.channels),
                   std::vector<double>(split.channels)};
  const double n = static_cast<double>(split.rows);
  for (int64_t c = 0; c < split.channels; ++c) {
    const double shifted_mean = sums.first[c] / n;
    stats.variance[c] = std::max(sums.second[c] / n - shifted_mean * shifted_mean, 0.0);
    stats.mean[c] = static_cast<float>(origin[c] + shifted_mean);
    stats.invstd[c] = static_cast<float>(1.0 / std::sqrt(stats.variance[c] + eps));
  }
  return stats;
}

class FusedBatchNorm : public autograd::Function<FusedBatchNorm> {
 public:
  static torch::Tensor forward(autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const c10::optional<torch::Tensor>& residual,
                               torch::Tensor running_mean, torch::Tensor running_var,
                               double momentum, double eps, bool relu) {
    return x.scalar_type() == torch::kBFloat16
               ? Forward<uint16_t>(ctx, x, weight, bias, residual, running_mean, running_var,
                                   momentum, eps, relu)
               : Forward<float>(ctx, x, weight, bias, residual, running_mean, running_var, momentum,
                                eps, relu);
  }

  static autograd::variable_list backward(autograd::AutogradContext* ctx,
                                          autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& y = saved[1];
    const torch::Tensor dy =
        grads[0].to(y.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
    return y.scalar_type() == torch::kBFloat16 ? Backward<uint16_t>(ctx, saved, dy)
                                               : Backward<float>(ctx, saved, dy);
  }

 private:
  template <typename T>
  static torch::Tensor Forward(autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const c10::optional<torch::Tensor>& residual,
                               torch::Tensor& running_mean, torch::Tensor& running_var,
                               double momentum, double eps, bool relu) {
    const int64_t channels = x.size(1);
    const RowSplit split(x.numel() / channels, channels);
    const Statistics stats = BatchStatistics<T>(x, split, eps);

    // Running statistics as nn.BatchNorm2d keeps them (unbiased variance).
    const double n = static_cast<double>(split.rows);
    std::vector<float> unbiased(channels);
    for (int64_t c = 0; c < channels; ++c) {
      unbiased[c] = static_cast<float>(stats.variance[c] * n / (n - 1));
    }
    running_mean.mul_(1 - momentum)
        .add_(FloatTensor(stats.mean).to(running_mean.dtype()), momentum);
    running_var.mul_(1 - momentum).add_(FloatTensor(unbiased).to(running_var.dtype()), momentum);

    const torch::Tensor w = weight.to(torch::kFloat32).contiguous();
    const torch::Tensor b = bias.to(torch::kFloat32).contiguous();
    std::vector<float> scale(channels), shift(channels);
    for (int64_t c = 0; c < channels; ++c) {
      scale[c] = w.data_ptr<float>()[c] * stats.invstd[c];
      shift[c] = b.data_ptr<float>()[c] - stats.mean[c] * scale[c];
    }
    torch::Tensor y = torch::empty_like(x, at::MemoryFormat::ChannelsLast);
    const T* in = Data<T>(x);
    const T* shortcut = DataOrNull<T>(residual);
    T* out = Data<T>(y);
    split.ForEach([&](int64_t chunk) {
      const int64_t offset = split.Offset(chunk);
      kernels::Normalize(in + offset, shortcut ? shortcut + offset : nullptr, out + offset,
                         split.Range(chunk), scale.data(), shift.data(), relu);
    });

    ctx->save_for_backward({x, y, w, FloatTensor(stats.mean), FloatTensor(stats.invstd)});
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["residual"] = residual.has_value() && residual->defined();
    ctx->saved_data["weight_dtype"] = weight.scalar_type();
    return y;
  }

  template <typename T>
  static autograd::variable_list Backward(autograd::AutogradContext* ctx,
                                          const autograd::variable_list& saved,
                                          const torch::Tensor& dy) {
    const torch::Tensor &x = saved[0], &y = saved[1], &w = saved[2];
    const float* mean = saved[3].data_ptr<float>();
    const float* invstd = saved[4].data_ptr<float>();
    const bool relu = ctx->saved_data["relu"].toBool();
    const bool has_residual = ctx->saved_data["residual"].toBool();
    const auto weight_dtype = ctx->saved_data["weight_dtype"].toScalarType();

    const int64_t channels = x.size(1);
    const RowSplit split(x.numel() / channels, channels);
    torch::Tensor residual_grad;
    if (has_residual) residual_grad = torch::empty_like(x, at::MemoryFormat::ChannelsLast);
    const T *grad = Data<T>(dy), *out = Data<T>(y), *in = Data<T>(x);
    T* shortcut_grad = has_residual ? Data<T>(residual_grad) : nullptr;
    const auto sums = split.Sum([&](int64_t chunk, double* sum_g, double* sum_gx) {
      const int64_t offset = split.Offset(chunk);
      kernels::ReduceGradient(grad + offset, out + offset, in + offset,
                              shortcut_grad ? shortcut_grad + offset : nullptr, split.Range(chunk),
                              mean, relu, sum_g, sum_gx);
    });

    const double n = static_cast<double>(split.rows);
    std::vector<float> a(channels), b(channels), k(channels), weight_grad(channels),
        bias_grad(channels);
    for (int64_t c = 0; c < channels; ++c) {
      const double s = static_cast<double>(w.data_ptr<float>()[c]) * invstd[c];
      a[c] = static_cast<float>(s);
      b[c] = static_cast<float>(s * sums.first[c] / n);
      k[c] = static_cast<float>(s * invstd[c] * invstd[c] * sums.second[c] / n);
      weight_grad[c] = static_cast<float>(sums.second[c] * invstd[c]);
      bias_grad[c] = static_cast<float>(sums.first[c]);
    }
    torch::Tensor input_grad = torch::empty_like(x, at::MemoryFormat::ChannelsLast);
    T* dx = Data<T>(input_grad);
    split.ForEach([&](int64_t chunk) {
      const int64_t offset = split.Offset(chunk);
      kernels::InputGradient(grad + offset, out + offset, in + offset, dx + offset,
                             split.Range(chunk), mean, a.data(), b.data(), k.data(), relu);
    });
    return {input_grad,
            FloatTensor(weight_grad).to(weight_dtype),
            FloatTensor(bias_grad).to(weight_dtype),
            residual_grad,
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

// Evaluation: the running statistics, one pass, no autograd node.
template <typename T>
torch::Tensor Infer(const torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                    const torch::Tensor& residual, bool relu) {
  const int64_t channels = x.size(1);
  const RowSplit split(x.numel() / channels, channels);
  const auto as_float = [](const torch::Tensor& t) { return t.to(torch::kFloat32).contiguous(); };
  const torch::Tensor w = as_float(bn.weight), b = as_float(bn.bias);
  const torch::Tensor mean = as_float(bn.running_mean), var = as_float(bn.running_var);
  std::vector<float> scale(channels), shift(channels);
  for (int64_t c = 0; c < channels; ++c) {
    scale[c] = static_cast<float>(w.data_ptr<float>()[c] /
                                  std::sqrt(var.data_ptr<float>()[c] + bn.options.eps()));
    shift[c] = b.data_ptr<float>()[c] - mean.data_ptr<float>()[c] * scale[c];
  }
  torch::Tensor y = torch::empty_like(x, at::MemoryFormat::ChannelsLast);
  const T* in = Data<T>(x);
  const T* shortcut = residual.defined() ? Data<T>(residual) : nullptr;
  T* out = Data<T>(y);
  split.ForEach([&](int64_t chunk) {
    const int64_t offset = split.Offset(chunk);
    kernels::Normalize(in + offset, shortcut ? shortcut + offset : nullptr, out + offset,
                       split.Range(chunk), scale.data(), shift.data(), relu);
  });
  return y;
}

// The tensors the kernels take: 4-D channels-last float or bfloat16 on the
// CPU, a residual of the same type and shape, float affine parameters.
bool KernelTakes(const torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                 const torch::Tensor& residual) {
  const bool dtype_ok = x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16;
  const bool residual_ok =
      !residual.defined() ||
      (residual.scalar_type() == x.scalar_type() && residual.sizes() == x.sizes() &&
       residual.is_contiguous(at::MemoryFormat::ChannelsLast));
  return fused_enabled.load(std::memory_order_relaxed) && bn.options.affine() &&
         bn.options.track_running_stats() && x.is_cpu() && dtype_ok && x.dim() == 4 &&
         x.size(1) <= kernels::kMaxChannels && x.is_contiguous(at::MemoryFormat::ChannelsLast) &&
         bn.weight.scalar_type() == torch::kFloat32 && residual_ok;
}

// Training needs more than one value per channel (ATen's error otherwise)
// and an exponential running average.
bool TrainingApplies(const torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) {
  return bn.is_training() && bn.options.momentum().has_value() &&
         x.numel() / std::max<int64_t>(x.size(1), 1) > 1;
}

// Evaluation without autograd (evaluate.cc runs under NoGradGuard).
bool InferenceApplies(const torch::nn::BatchNorm2dImpl& bn) {
  return !bn.is_training() && !torch::GradMode::is_enabled();
}

torch::Tensor Unfused(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, Activation activation,
                      const torch::Tensor& residual) {
  // In place after batch norm: its backward needs its input, not its output.
  torch::Tensor out = bn.forward(x);
  if (residual.defined()) out.add_(residual);
  if (activation == Activation::kRelu) out.relu_();
  return out;
}

}  // namespace

bool FusedBatchNormApplies(const torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                           const torch::Tensor& residual) {
  return KernelTakes(bn, x, residual) && (TrainingApplies(bn, x) || InferenceApplies(bn));
}

torch::Tensor BatchNormAct(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                           Activation activation, const torch::Tensor& residual) {
  const bool relu = activation == Activation::kRelu;
  if (!KernelTakes(bn, x, residual)) return Unfused(bn, x, activation, residual);
  if (InferenceApplies(bn)) {
    return x.scalar_type() == torch::kBFloat16 ? Infer<uint16_t>(bn, x, residual, relu)
                                               : Infer<float>(bn, x, residual, relu);
  }
  if (!TrainingApplies(bn, x)) return Unfused(bn, x, activation, residual);
  {
    torch::NoGradGuard no_grad;
    bn.num_batches_tracked += 1;
  }
  c10::optional<torch::Tensor> shortcut;
  if (residual.defined()) shortcut = residual;
  return FusedBatchNorm::apply(x, bn.weight, bn.bias, shortcut, bn.running_mean, bn.running_var,
                               *bn.options.momentum(), bn.options.eps(), relu);
}

void EnableFusedBatchNorm(bool enabled) { fused_enabled.store(enabled); }

bool FusedBatchNormEnabled() { return fused_enabled.load(); }

}  // namespace elastic::models
