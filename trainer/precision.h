// The arithmetic of the training step: the precision autocast computes in and
// the memory format of images and convolution weights. Master weights,
// gradients, their allreduce and checkpoints stay float32 whatever is chosen,
// except under fp64, where everything is float64.
//
// The defaults are decided here, as pure functions of what the machine can do,
// so a run says what it chose and why, and tests pin the rules without a CPU
// of each kind.
#pragma once

#include <string>
#include <vector>

namespace elastic::trainer {

enum class Precision {
  kFloat32,
  kBFloat16,  // autocast to bfloat16 (float32's range: no loss scaling)
  kFloat16,   // CUDA only: autocast to float16 with dynamic loss scaling
  // Weights, activations, gradients, their allreduce, optimizer state and
  // checkpoints in float64: a run whose rounding is far below any difference
  // of method, to compare step for step with another trainer (bench/float64_check.py).
  kFloat64,
};

// "fp32", "bf16", "fp16", "fp64".
const char* PrecisionName(Precision precision);

// What this CPU runs natively, from cpuid and the OS's enabled register state.
struct CpuFeatures {
  bool avx512_bf16 = false;  // AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4/5)
  bool amx_bf16 = false;     // AMX tiles with bf16 (Sapphire Rapids and later)
  // How far LibTorch's bf16 convolutions are from fp32's on this CPU, as a
  // relative error (MeasureBf16ConvolutionError in amp.h; 0: not measured).
  // Instructions are not enough: LibTorch 1.13 without oneDNN's bf16 kernels
  // (CPUs without AVX-512) sums convolution gradients in bf16.
  double bf16_convolution_error = 0;
};

// A correct bf16 convolution rounds its operands once: about 0.3% from fp32
// in norm. Above this, it sums in bf16 and trains a broken model.
constexpr double kMaxBf16ConvolutionError = 0.01;
CpuFeatures DetectCpuFeatures();
// "AMX-BF16 and AVX512-BF16", "AVX512-BF16", or "no bf16 instructions".
std::string DescribeCpu(const CpuFeatures& cpu);

struct PrecisionChoice {
  Precision precision = Precision::kFloat32;
  std::string why;  // one clause for the first lines of a run
};

// --precision: auto picks bf16 on a CPU that runs it natively (AMX-BF16 or
// AVX512-BF16) and correctly (cpu.bf16_convolution_error), fp32 on every
// other CPU and on CUDA (where fp16 and bf16 are a choice the user makes);
// fp32/bf16/fp16 force it. Throws FlagError (naming --precision) for an
// unknown value, fp16 on a CPU, and bf16 on a CPU whose bf16 convolutions are
// wrong (the message says by how much and what to use instead).
PrecisionChoice ChoosePrecision(const std::string& requested, bool cuda, const CpuFeatures& cpu);

// Whether ChoosePrecision needs cpu.bf16_convolution_error for `requested`
// (measuring it costs a few convolutions).
bool NeedsBf16Check(const std::string& requested, bool cuda, const CpuFeatures& cpu);

// Values of --precision, for --help.
std::vector<std::string> PrecisionValues();

// --memory-format: auto picks channels-last for the models where it was
// measured faster (models/registry.h, PrefersChannelsLast), and contiguous
// under fp64 (ATen's reference kernels); contiguous / channels-last force it.
// Throws FlagError for an unknown value.
bool ChooseChannelsLast(const std::string& requested, bool model_prefers_channels_last,
                        Precision precision = Precision::kFloat32);
std::vector<std::string> MemoryFormatValues();

}  // namespace elastic::trainer
