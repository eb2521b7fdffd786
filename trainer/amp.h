// Mixed precision: autocast for the forward pass and dynamic loss scaling.
//
// With fp16 (CUDA), autocast runs eligible ops in float16, whose small range
// makes gradients underflow; the loss is multiplied by a scale before
// backward, the gradients divided by it after, and the scale adapts: halved
// (and the step skipped) when a gradient overflows, doubled after
// `growth_interval` clean steps, as torch.cuda.amp.GradScaler does. bf16 has
// float32's range, so no scaling is needed. Which precision: precision.h.
#pragma once

#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/precision.h"

namespace elastic::trainer {

// Throws std::runtime_error when this LibTorch cannot autocast to
// `precision` on `device` (fp16 on a CPU, a device without autocast).
void CheckAutocastSupported(const torch::Device& device, Precision precision);

// The type of weights, gradients and inputs: float64 under fp64, float32 under
// every other precision (autocast lowers the arithmetic, not the weights).
torch::Dtype WeightType(Precision precision);

// Floating-point inputs in the weights' type; other inputs (token ids) as they are.
torch::Tensor InWeightType(const torch::Tensor& inputs, Precision precision);

// The floating-point parameters and buffers of `model` in `type`, each the same
// autograd variable as before (integer buffers such as batch norm's counter
// keep theirs, as PyTorch's Module.double() does).
void ToWeightType(torch::nn::Module& model, torch::Dtype type);

// The largest relative error (norm of the difference over fp32's norm) of a
// bf16-autocast 3x3 convolution's output, input gradient and weight gradient
// against fp32, channels-last and contiguous, on this CPU. Measured once per
// process on fixed inputs (milliseconds where bf16 is native); the global
// random generator is not touched.
double MeasureBf16ConvolutionError();

// DetectCpuFeatures, with bf16_convolution_error measured where
// ChoosePrecision needs it for `requested` (NeedsBf16Check).
CpuFeatures DetectCpuFeaturesFor(const std::string& requested, bool cuda);

// Autocast to `precision` on `device` for the current thread while in scope
// (nothing for fp32). Only the forward pass and the loss belong inside it.
class AutocastScope {
 public:
  AutocastScope(const torch::Device& device, Precision precision);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool cuda_ = false;
  bool enabled_ = false;
  at::ScalarType dtype_ = at::kFloat;
  bool previous_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(double initial_scale = 65536.0, double growth_factor = 2.0,
                             double backoff_factor = 0.5, int64_t growth_interval = 2000);

  torch::Tensor Scale(const torch::Tensor& loss) const { return loss * scale_; }

  // Divides every defined gradient by the scale. Returns false when any of
  // them holds inf or NaN: the caller must skip the optimizer step.
  bool Unscale(const std::vector<torch::Tensor>& params) const;

  // After each step: backoff on overflow, growth after enough clean steps.
  void Update(bool found_overflow);

  double scale() const { return scale_; }

  void Save(torch::serialize::OutputArchive& archive) const;
  void Load(torch::serialize::InputArchive& archive);

 private:
  double scale_;
  double growth_factor_;
  double backoff_factor_;
  int64_t growth_interval_;
  int64_t clean_steps_ = 0;
};

}  // namespace elastic::trainer
