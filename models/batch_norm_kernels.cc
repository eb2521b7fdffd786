#include "models/batch_norm_kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

// Each entry point is compiled three times and the loader picks the widest
// the CPU has (GCC function multiversioning); the bodies are inlined into each.
#define ELASTIC_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define ELASTIC_INLINE inline __attribute__((always_inline))

namespace elastic::models::kernels {
namespace {

// Rows summed in float before the block's sums move to double: short enough
// that float's rounding stays far below bf16's, long enough to amortise.
constexpr int64_t kBlockRows = 256;

ELASTIC_INLINE float Load(const float* p) { return *p; }
ELASTIC_INLINE float Load(const uint16_t* p) {
  const uint32_t bits = static_cast<uint32_t>(*p) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

ELASTIC_INLINE void Store(float* p, float value) { *p = value; }
ELASTIC_INLINE void Store(uint16_t* p, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  // A NaN stays a (quiet) NaN rather than rounding into infinity.
  *p = static_cast<uint16_t>(value != value ? 0x7FC0u : rounded);
}

template <typename T>
ELASTIC_INLINE void SumShiftedBody(const T* __restrict x, Rows rows, const float* __restrict origin,
                                   double* __restrict sum, double* __restrict square) {
  const int64_t channels = rows.channels;
  float block_sum[kMaxChannels];
  float block_square[kMaxChannels];
  for (int64_t first = 0; first < rows.count; first += kBlockRows) {
    const int64_t last = std::min(rows.count, first + kBlockRows);
    for (int64_t c = 0; c < channels; ++c) block_sum[c] = block_square[c] = 0.0f;
    for (int64_t r = first; r < last; ++r) {
      const T* __restrict row = x + r * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const float d = Load(row + c) - origin[c];
        block_sum[c] += d;
        block_square[c] += d * d;
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      sum[c] += block_sum[c];
      square[c] += block_square[c];
    }
  }
}

template <typename T, bool kResidual, bool kRelu>
ELASTIC_INLINE void NormalizeBody(const T* __restrict x, const T* __restrict residual,
                                  T* __restrict y, Rows rows, const float* __restrict scale,
                                  const float* __restrict shift) {
  const int64_t channels = rows.channels;
  for (int64_t r = 0; r < rows.count; ++r) {
    const int64_t base = r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      float value = Load(x + base + c) * scale[c] + shift[c];
      if (kResidual) value += Load(residual + base + c);
      if (kRelu) value = std::max(value, 0.0f);
      Store(y + base + c, value);
    }
  }
}

template <typename T>
ELASTIC_INLINE void NormalizeDispatch(const T* x, const T* residual, T* y, Rows rows,
                                      const float* scale, const float* shift, bool relu) {
  if (residual != nullptr && relu)
    return NormalizeBody<T, true, true>(x, residual, y, rows, scale, shift);
  if (residual != nullptr) return NormalizeBody<T, true, false>(x, residual, y, rows, scale, shift);
  if (relu) return NormalizeBody<T, false, true>(x, nullptr, y, rows, scale, shift);
  NormalizeBody<T, false, false>(x, nullptr, y, rows, scale, shift);
}

// g: the gradient that reaches batch norm's output through ReLU's mask.
template <typename T, bool kRelu>
ELASTIC_INLINE float MaskedGradient(const T* dy, const T* y) {
  const float g = Load(dy);
  if (!kRelu) return g;
  return Load(y) > 0.0f ? g : 0.0f;
}

template <typename T, bool kResidual, bool kRelu>
ELASTIC_INLINE void ReduceGradientBody(const T* __restrict dy, const T* __restrict y,
                                       const T* __restrict x, T* __restrict residual_grad,
                                       Rows rows, const float* __restrict mean,
                                       double* __restrict sum_g, double* __restrict sum_gx) {
  const int64_t channels = rows.channels;
  float block_g[kMaxChannels];
  float block_gx[kMaxChannels];
  for (int64_t first = 0; first < rows.count; first += kBlockRows) {
    const int64_t last = std::min(rows.count, first + kBlockRows);
    for (int64_t c = 0; c < channels; ++c) block_g[c] = block_gx[c] = 0.0f;
    for (int64_t r = first; r < last; ++r) {
      const int64_t base = r * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const float g = MaskedGradient<T, kRelu>(dy + base + c, y + base + c);
        if (kResidual) Store(residual_grad + base + c, g);
        block_g[c] += g;
        block_gx[c] += g * (Load(x + base + c) - mean[c]);
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      sum_g[c] += block_g[c];
      sum_gx[c] += block_gx[c];
    }
  }
}

template <typename T>
ELASTIC_INLINE void ReduceGradientDispatch(const T* dy, const T* y, const T* x, T* residual_grad,
                                           Rows rows, const float* mean, bool relu, double* sum_g,
                                           double* sum_gx) {
  if (residual_grad != nullptr && relu) {
    return ReduceGradientBody<T, true, true>(dy, y, x, residual_grad, rows, mean, sum_g, sum_gx);
  }
  if (residual_grad != nullptr) {
    return ReduceGradientBody<T, true, false>(dy, y, x, residual_grad, rows, mean, sum_g, sum_gx);
  }
  if (relu) return ReduceGradientBody<T, false, true>(dy, y, x, nullptr, rows, mean, sum_g, sum_gx);
  ReduceGradientBody<T, false, false>(dy, y, x, nullptr, rows, mean, sum_g, sum_gx);
}

template <typename T, bool kRelu>
ELASTIC_INLINE void InputGradientBody(const T* __restrict dy, const T* __restrict y,
                                      const T* __restrict x, T* __restrict dx, Rows rows,
                                      const float* __restrict mean, const float* __restrict a,
                                      const float* __restrict b, const float* __restrict k) {
  const int64_t channels = rows.channels;
  for (int64_t r = 0; r < rows.count; ++r) {
    const int64_t base = r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const float g = MaskedGradient<T, kRelu>(dy + base + c, y + base + c);
      Store(dx + base + c, g * a[c] - b[c] - (Load(x + base + c) - mean[c]) * k[c]);
    }
  }
}

template <typename T>
ELASTIC_INLINE void InputGradientDispatch(const T* dy, const T* y, const T* x, T* dx, Rows rows,
                                          const float* mean, const float* a, const float* b,
                                          const float* k, bool relu) {
  if (relu) return InputGradientBody<T, true>(dy, y, x, dx, rows, mean, a, b, k);
  InputGradientBody<T, false>(dy, y, x, dx, rows, mean, a, b, k);
}

}  // namespace

ELASTIC_VECTOR_CLONES void SumShifted(const float* x, Rows rows, const float* origin, double* sum,
                                      double* square) {
  SumShiftedBody(x, rows, origin, sum, square);
}
ELASTIC_VECTOR_CLONES void SumShifted(const uint16_t* x, Rows rows, const float* origin,
                                      double* sum, double* square) {
  SumShiftedBody(x, rows, origin, sum, square);
}

ELASTIC_VECTOR_CLONES void Normalize(const float* x, const float* residual, float* y, Rows rows,
                                     const float* scale, const float* shift, bool relu) {
  NormalizeDispatch(x, residual, y, rows, scale, shift, relu);
}
ELASTIC_VECTOR_CLONES void Normalize(const uint16_t* x, const uint16_t* residual, uint16_t* y,
                                     Rows rows, const float* scale, const float* shift, bool relu) {
  NormalizeDispatch(x, residual, y, rows, scale, shift, relu);
}

ELASTIC_VECTOR_CLONES void ReduceGradient(const float* dy, const float* y, const float* x,
                                          float* residual_grad, Rows rows, const float* mean,
                                          bool relu, double* sum_g, double* sum_gx) {
  ReduceGradientDispatch(dy, y, x, residual_grad, rows, mean, relu, sum_g, sum_gx);
}
ELASTIC_VECTOR_CLONES void ReduceGradient(const uint16_t* dy, const uint16_t* y, const uint16_t* x,
                                          uint16_t* residual_grad, Rows rows, const float* mean,
                                          bool relu, double* sum_g, double* sum_gx) {
  ReduceGradientDispatch(dy, y, x, residual_grad, rows, mean, relu, sum_g, sum_gx);
}

ELASTIC_VECTOR_CLONES void InputGradient(const float* dy, const float* y, const float* x, float* dx,
                                         Rows rows, const float* mean, const float* a,
                                         const float* b, const float* k, bool relu) {
  InputGradientDispatch(dy, y, x, dx, rows, mean, a, b, k, relu);
}
ELASTIC_VECTOR_CLONES void InputGradient(const uint16_t* dy, const uint16_t* y, const uint16_t* x,
                                         uint16_t* dx, Rows rows, const float* mean, const float* a,
                                         const float* b, const float* k, bool relu) {
  InputGradientDispatch(dy, y, x, dx, rows, mean, a, b, k, relu);
}

float Bf16ToFloat(uint16_t bits) { return Load(&bits); }

uint16_t FloatToBf16(float value) {
  uint16_t bits;
  Store(&bits, value);
  return bits;
}

}  // namespace elastic::models::kernels
