// Batch norm in training mode, fused with an optional residual add and ReLU,
// over channels-last (NHWC) data: one row of `channels` values per pixel.
//
// Why: ATen 1.13's CPU batch norm runs at a fraction of memory bandwidth on
// channels-last bf16 (a 128x16x32x32 forward takes 3.7x the time of reading
// and writing it), and ReLU and the add are separate passes. In resnet8 they
// are a third of the step. These loops touch each tensor the fewest times the
// maths allows and vectorise across channels: each is compiled for AVX512,
// AVX2 + FMA and baseline x86-64, and the widest the CPU has runs (a test can
// choose another, so that every version is checked on one machine).
//
// Pure functions on raw arrays, no LibTorch: a caller splits the rows between
// threads and combines the per-channel sums. Elements are float or bfloat16
// (its bits in a uint16_t); sums and statistics are float, accumulated in
// double across blocks of rows.
#ifndef ELASTIC_MODELS_BATCH_NORM_KERNELS_H_
#define ELASTIC_MODELS_BATCH_NORM_KERNELS_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace elastic::models::kernels {

// The most channels a kernel takes (its per-channel block sums live on the stack).
constexpr int64_t kMaxChannels = 4096;

// One contiguous range of rows of a [rows, channels] tensor.
struct Rows {
  int64_t count = 0;
  int64_t channels = 0;
};

// The instruction sets the kernels are compiled for, narrowest first.
enum class InstructionSet { kBaseline, kAvx2, kAvx512 };

// "baseline", "avx2", "avx512".
const char* InstructionSetName(InstructionSet set);

// The sets this CPU runs (baseline, and what its cpuid and OS allow).
std::vector<InstructionSet> InstructionSetsOfThisCpu();

// The set the entry points below use now.
InstructionSet ActiveInstructionSet();

// For tests and benchmarks: every entry point runs `set`'s version from now
// on, process-wide; std::nullopt goes back to the widest this CPU has.
// Throws std::invalid_argument for a set this CPU cannot run.
void UseInstructionSet(std::optional<InstructionSet> set);

// sum[c] += sum over rows of (x - origin[c]); square[c] += sum of its square.
// Shifting by a value of the channel (any row's) keeps the variance exact when
// the mean is large against the spread.
void SumShifted(const float* x, Rows rows, const float* origin, double* sum, double* square);
void SumShifted(const uint16_t* x, Rows rows, const float* origin, double* sum, double* square);

// y = x * scale[c] + shift[c] (+ residual), then max(y, 0) if relu.
// residual may be null; it has x's element type and layout.
void Normalize(const float* x, const float* residual, float* y, Rows rows, const float* scale,
               const float* shift, bool relu);
void Normalize(const uint16_t* x, const uint16_t* residual, uint16_t* y, Rows rows,
               const float* scale, const float* shift, bool relu);

// Backward, first pass. g = dy, or dy where y > 0 if relu (y: the forward's
// output). sum_g[c] += sum of g; sum_gx[c] += sum of g * (x - mean[c]).
// If residual_grad is not null, g is written to it (the add's gradient).
void ReduceGradient(const float* dy, const float* y, const float* x, float* residual_grad,
                    Rows rows, const float* mean, bool relu, double* sum_g, double* sum_gx);
void ReduceGradient(const uint16_t* dy, const uint16_t* y, const uint16_t* x,
                    uint16_t* residual_grad, Rows rows, const float* mean, bool relu, double* sum_g,
                    double* sum_gx);

// Backward, second pass: dx = g * a[c] - b[c] - (x - mean[c]) * k[c], with
// a = weight * invstd, b = a * mean(g), k = a * invstd^2 * mean(g * (x - mean)).
void InputGradient(const float* dy, const float* y, const float* x, float* dx, Rows rows,
                   const float* mean, const float* a, const float* b, const float* k, bool relu);
void InputGradient(const uint16_t* dy, const uint16_t* y, const uint16_t* x, uint16_t* dx,
                   Rows rows, const float* mean, const float* a, const float* b, const float* k,
                   bool relu);

// bfloat16 <-> float as the kernels do it (round to nearest even, NaN kept).
float Bf16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);

}  // namespace elastic::models::kernels

#endif  // ELASTIC_MODELS_BATCH_NORM_KERNELS_H_
