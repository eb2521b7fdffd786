#include "trainer/amp.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace elastic::trainer {
namespace {

// LibTorch 2.4 replaced the per-backend autocast calls (Debian's 1.13 has only
// those) by calls that take the device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool AutocastEnabled(at::DeviceType type) { return at::autocast::is_autocast_enabled(type); }
void SetAutocastEnabled(at::DeviceType type, bool on) {
  at::autocast::set_autocast_enabled(type, on);
}
at::ScalarType AutocastDtype(at::DeviceType type) { return at::autocast::get_autocast_dtype(type); }
void SetAutocastDtype(at::DeviceType type, at::ScalarType dtype) {
  at::autocast::set_autocast_dtype(type, dtype);
}
#else
bool AutocastEnabled(at::DeviceType type) {
  return type == at::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void SetAutocastEnabled(at::DeviceType type, bool on) {
  type == at::kCUDA ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on);
}
at::ScalarType AutocastDtype(at::DeviceType type) {
  return type == at::kCUDA ? at::autocast::get_autocast_gpu_dtype()
                           : at::autocast::get_autocast_cpu_dtype();
}
void SetAutocastDtype(at::DeviceType type, at::ScalarType dtype) {
  type == at::kCUDA ? at::autocast::set_autocast_gpu_dtype(dtype)
                    : at::autocast::set_autocast_cpu_dtype(dtype);
}
#endif

}  // namespace

namespace {

bool Autocasts(Precision precision) {
  return precision == Precision::kBFloat16 || precision == Precision::kFloat16;
}

at::ScalarType AutocastType(Precision precision) {
  return precision == Precision::kFloat16 ? at::kHalf : at::kBFloat16;
}

}  // namespace

torch::Dtype WeightType(Precision precision) {
  return precision == Precision::kFloat64 ? torch::kDouble : torch::kFloat;
}

torch::Tensor InWeightType(const torch::Tensor& inputs, Precision precision) {
  const torch::Dtype type = WeightType(precision);
  return inputs.is_floating_point() && inputs.scalar_type() != type ? inputs.to(type) : inputs;
}

void ToWeightType(torch::nn::Module& model, torch::Dtype type) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : model.parameters()) {
    if (p.is_floating_point() && p.scalar_type() != type) p.set_data(p.data().to(type));
  }
  for (torch::Tensor& b : model.buffers()) {
    if (b.is_floating_point() && b.scalar_type() != type) b.set_data(b.data().to(type));
  }
}

void CheckAutocastSupported(const torch::Device& device, Precision precision) {
  if (!Autocasts(precision)) return;
  const std::string what = std::string("--precision=") + PrecisionName(precision);
  if (!device.is_cpu() && !device.is_cuda()) {
    throw std::runtime_error(what + ": autocast is supported on CPU and CUDA only, not on " +
                             device.str());
  }
  if (precision == Precision::kFloat16 && device.is_cpu()) {
    throw std::runtime_error(what + ": fp16 autocast is for CUDA; on a CPU use bf16 or fp32");
  }
  // Ask the dispatcher, rather than trusting headers: one autocast-eligible op
  // must come back in the lower precision.
  torch::NoGradGuard no_grad;
  AutocastScope scope(device, precision);
  torch::Tensor a = torch::ones({2, 2}, torch::TensorOptions().device(device));
  const at::ScalarType want = AutocastType(precision);
  if (torch::mm(a, a).scalar_type() != want) {
    throw std::runtime_error(what + ": this LibTorch does not autocast to " + c10::toString(want) +
                             " on " + device.str());
  }
}

namespace {

double RelativeError(const torch::Tensor& value, const torch::Tensor& reference) {
  const torch::Tensor want = reference.to(torch::kDouble);
  return ((value.to(torch::kDouble) - want).norm() / want.norm()).item<double>();
}

// One convolution forward and backward in `precision` on `memory_format`
// inputs: its output and the gradients of its input and weight, in float.
std::vector<torch::Tensor> ConvolutionAndGradients(const torch::Tensor& x, const torch::Tensor& w,
                                                   const torch::Tensor& upstream,
                                                   Precision precision,
                                                   at::MemoryFormat memory_format) {
  torch::Tensor input = x.contiguous(memory_format).requires_grad_();
  torch::Tensor weight = w.contiguous(memory_format).requires_grad_();
  torch::Tensor output;
  {
    AutocastScope autocast(torch::kCPU, precision);
    output = torch::conv2d(input, weight, {}, 1, 1);
  }
  output.backward(upstream.to(output.scalar_type()).contiguous(memory_format));
  return {output.detach().to(torch::kFloat), input.grad(), weight.grad()};
}

}  // namespace

double MeasureBf16ConvolutionError() {
  static const double error = [] {
    torch::AutoGradMode grad_mode(true);
    // 32 x 32 x 32 pixels: gradient sums of 32,768 terms, far past the 256
    // after which a bf16 running sum stops taking small terms in.
    at::Generator generator = at::detail::createCPUGenerator(20261125);
    const auto options = torch::TensorOptions().dtype(torch::kFloat);
    const torch::Tensor x = torch::randn({32, 16, 32, 32}, generator, options);
    const torch::Tensor w = torch::randn({16, 16, 3, 3}, generator, options) / 12;
    const torch::Tensor upstream = torch::randn({32, 16, 32, 32}, generator, options);
    double worst = 0;
    for (const auto format : {at::MemoryFormat::ChannelsLast, at::MemoryFormat::Contiguous}) {
      const auto reference = ConvolutionAndGradients(x, w, upstream, Precision::kFloat32, format);
      const auto bf16 = ConvolutionAndGradients(x, w, upstream, Precision::kBFloat16, format);
      for (size_t i = 0; i < reference.size(); ++i) {
        worst = std::max(worst, RelativeError(bf16[i], reference[i]));
      }
    }
    return worst;
  }();
  return error;
}

CpuFeatures DetectCpuFeaturesFor(const std::string& requested, bool cuda) {
  CpuFeatures cpu = DetectCpuFeatures();
  if (NeedsBf16Check(requested, cuda, cpu)) {
    cpu.bf16_convolution_error = MeasureBf16ConvolutionError();
  }
  return cpu;
}

AutocastScope::AutocastScope(const torch::Device& device, Precision precision)
    : cuda_(device.is_cuda()), enabled_(Autocasts(precision)), dtype_(AutocastType(precision)) {
  if (!enabled_) return;
  const at::DeviceType type = cuda_ ? at::kCUDA : at::kCPU;
  previous_ = AutocastEnabled(type);
  previous_dtype_ = AutocastDtype(type);
  SetAutocastDtype(type, dtype_);
  SetAutocastEnabled(type, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  // The cast cache holds lower-precision copies of the weights; it must not
  // outlive the step, or the next step would see stale weights.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  const at::DeviceType type = cuda_ ? at::kCUDA : at::kCPU;
  SetAutocastEnabled(type, previous_);
  SetAutocastDtype(type, previous_dtype_);
}

DynamicLossScaler::DynamicLossScaler(double initial_scale, double growth_factor,
                                     double backoff_factor, int64_t growth_interval)
    : scale_(initial_scale),
      growth_factor_(growth_factor),
      backoff_factor_(backoff_factor),
      growth_interval_(growth_interval) {}

bool DynamicLossScaler::Unscale(const std::vector<torch::Tensor>& params) const {
  torch::NoGradGuard no_grad;
  bool finite = true;
  for (const torch::Tensor& p : params) {
    torch::Tensor grad = p.grad();
    if (!grad.defined()) continue;
    grad.mul_(1.0 / scale_);
    finite = finite && torch::isfinite(grad).all().item<bool>();
  }
  return finite;
}

void DynamicLossScaler::Update(bool found_overflow) {
  if (found_overflow) {
    scale_ *= backoff_factor_;
    clean_steps_ = 0;
  } else if (++clean_steps_ >= growth_interval_) {
    scale_ *= growth_factor_;
    clean_steps_ = 0;
  }
}

void DynamicLossScaler::Save(torch::serialize::OutputArchive& archive) const {
  archive.write("scale", torch::tensor(scale_, torch::kFloat64));
  archive.write("clean_steps", torch::tensor(clean_steps_));
}

void DynamicLossScaler::Load(torch::serialize::InputArchive& archive) {
  torch::Tensor scale, clean_steps;
  archive.read("scale", scale);
  archive.read("clean_steps", clean_steps);
  scale_ = scale.item<double>();
  clean_steps_ = clean_steps.item<int64_t>();
}

}  // namespace elastic::trainer
