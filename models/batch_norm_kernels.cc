#include "models/batch_norm_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

// Each entry point is compiled once per instruction set (a target attribute
// on a thin wrapper, the bodies inlined into it) and called through the table
// of the set in use: the widest the CPU has, or the one a test chose.
#define ELASTIC_INLINE inline __attribute__((always_inline))
// Lambdas inside a body must be inlined into its wrapper to get its target.
#define ELASTIC_LAMBDA_INLINE __attribute__((always_inline))

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
  // Round to nearest even. A NaN stays a NaN: the ones arithmetic makes here
  // (x86's default NaN, or a bf16 input's, quieted) have the top mantissa bit
  // set, which the carry cannot clear.
  *p = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// The loops walk tiles of rows (about 32 KiB of each tensor, so a tile stays
// in the L1/L2 caches however many channels there are) and, within a tile,
// blocks of channels whose width is a compile-time constant (64, 32, 16, 8,
// then single channels): the compiler unrolls the channel loop and keeps the
// block's sums and coefficients in vector registers, where a loop over a
// run-time channel count would load and store them for every row.
constexpr int64_t kTileElements = 16384;

template <typename Body>
ELASTIC_INLINE void ForChannelBlocks(int64_t channels, const Body& body) {
  int64_t first = 0;
  for (; first + 64 <= channels; first += 64) body(std::integral_constant<int64_t, 64>(), first);
  for (; first + 32 <= channels; first += 32) body(std::integral_constant<int64_t, 32>(), first);
  for (; first + 16 <= channels; first += 16) body(std::integral_constant<int64_t, 16>(), first);
  for (; first + 8 <= channels; first += 8) body(std::integral_constant<int64_t, 8>(), first);
  for (; first < channels; ++first) body(std::integral_constant<int64_t, 1>(), first);
}

// body(width, first channel, first row, end row) for every tile and block.
template <typename Body>
ELASTIC_INLINE void ForTilesAndBlocks(Rows rows, const Body& body) {
  const int64_t tile = std::clamp<int64_t>(kTileElements / rows.channels, 8, kBlockRows);
  for (int64_t first = 0; first < rows.count; first += tile) {
    const int64_t last = std::min(rows.count, first + tile);
    ForChannelBlocks(rows.channels, [&](auto width, int64_t block)
                                        ELASTIC_LAMBDA_INLINE { body(width, block, first, last); });
  }
}

template <int64_t kWidth>
ELASTIC_INLINE void CopyBlock(const float* from, float* to) {
  for (int64_t c = 0; c < kWidth; ++c) to[c] = from[c];
}

// Narrow blocks sum several rows into separate accumulators: one add chain per
// channel would wait on the adder's latency every row.
template <int64_t kWidth>
constexpr int64_t kLanes = kWidth >= 64 ? 1 : (kWidth >= 16 ? 64 / kWidth : 1);

// Sums row(r, s, t) over rows [first, last) into kLanes<kWidth> accumulator
// pairs, then adds them to the double totals of the block.
template <int64_t kWidth, typename Row>
ELASTIC_INLINE void SumRows(int64_t first, int64_t last, const Row& row, double* __restrict total_s,
                            double* __restrict total_t) {
  constexpr int64_t kRows = kLanes<kWidth>;
  float s[kRows][kWidth] = {}, t[kRows][kWidth] = {};
  int64_t r = first;
  for (; r + kRows <= last; r += kRows) {
    for (int64_t lane = 0; lane < kRows; ++lane) row(r + lane, s[lane], t[lane]);
  }
  for (; r < last; ++r) row(r, s[0], t[0]);
  for (int64_t lane = 0; lane < kRows; ++lane) {
    for (int64_t c = 0; c < kWidth; ++c) {
      total_s[c] += s[lane][c];
      total_t[c] += t[lane][c];
    }
  }
}

template <typename T>
ELASTIC_INLINE void SumShiftedBody(const T* __restrict x, Rows rows, const float* __restrict origin,
                                   double* __restrict sum, double* __restrict square) {
  ForTilesAndBlocks(
      rows, [&](auto width, int64_t block, int64_t first, int64_t last) ELASTIC_LAMBDA_INLINE {
        constexpr int64_t kWidth = decltype(width)::value;
        float o[kWidth];
        CopyBlock<kWidth>(origin + block, o);
        SumRows<kWidth>(
            first, last,
            [&](int64_t r, float* s, float* q) ELASTIC_LAMBDA_INLINE {
              const T* __restrict row = x + r * rows.channels + block;
              for (int64_t c = 0; c < kWidth; ++c) {
                const float d = Load(row + c) - o[c];
                s[c] += d;
                q[c] += d * d;
              }
            },
            sum + block, square + block);
      });
}

template <typename T, bool kResidual, bool kRelu>
ELASTIC_INLINE void NormalizeBody(const T* __restrict x, const T* __restrict residual,
                                  T* __restrict y, Rows rows, const float* __restrict scale,
                                  const float* __restrict shift) {
  ForTilesAndBlocks(
      rows, [&](auto width, int64_t block, int64_t first, int64_t last) ELASTIC_LAMBDA_INLINE {
        constexpr int64_t kWidth = decltype(width)::value;
        float a[kWidth], b[kWidth];
        CopyBlock<kWidth>(scale + block, a);
        CopyBlock<kWidth>(shift + block, b);
        for (int64_t r = first; r < last; ++r) {
          const int64_t base = r * rows.channels + block;
          for (int64_t c = 0; c < kWidth; ++c) {
            float value = Load(x + base + c) * a[c] + b[c];
            if (kResidual) value += Load(residual + base + c);
            if (kRelu) value = std::max(value, 0.0f);
            Store(y + base + c, value);
          }
        }
      });
}

template <typename T>
ELASTIC_INLINE void NormalizeDispatch(const T* x, const T* residual, T* y, Rows rows,
                                      const float* scale, const float* shift, bool relu) {
  if (residual != nullptr && relu) {
    return NormalizeBody<T, true, true>(x, residual, y, rows, scale, shift);
  }
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
  ForTilesAndBlocks(
      rows, [&](auto width, int64_t block, int64_t first, int64_t last) ELASTIC_LAMBDA_INLINE {
        constexpr int64_t kWidth = decltype(width)::value;
        float m[kWidth];
        CopyBlock<kWidth>(mean + block, m);
        SumRows<kWidth>(
            first, last,
            [&](int64_t r, float* s, float* sx) ELASTIC_LAMBDA_INLINE {
              const int64_t base = r * rows.channels + block;
              for (int64_t c = 0; c < kWidth; ++c) {
                const float g = MaskedGradient<T, kRelu>(dy + base + c, y + base + c);
                if (kResidual) Store(residual_grad + base + c, g);
                s[c] += g;
                sx[c] += g * (Load(x + base + c) - m[c]);
              }
            },
            sum_g + block, sum_gx + block);
      });
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
  ForTilesAndBlocks(
      rows, [&](auto width, int64_t block, int64_t first, int64_t last) ELASTIC_LAMBDA_INLINE {
        constexpr int64_t kWidth = decltype(width)::value;
        float m[kWidth], ab[kWidth], bb[kWidth], kb[kWidth];
        CopyBlock<kWidth>(mean + block, m);
        CopyBlock<kWidth>(a + block, ab);
        CopyBlock<kWidth>(b + block, bb);
        CopyBlock<kWidth>(k + block, kb);
        for (int64_t r = first; r < last; ++r) {
          const int64_t base = r * rows.channels + block;
          for (int64_t c = 0; c < kWidth; ++c) {
            const float g = MaskedGradient<T, kRelu>(dy + base + c, y + base + c);
            Store(dx + base + c, g * ab[c] - bb[c] - (Load(x + base + c) - m[c]) * kb[c]);
          }
        }
      });
}

template <typename T>
ELASTIC_INLINE void InputGradientDispatch(const T* dy, const T* y, const T* x, T* dx, Rows rows,
                                          const float* mean, const float* a, const float* b,
                                          const float* k, bool relu) {
  if (relu) return InputGradientBody<T, true>(dy, y, x, dx, rows, mean, a, b, k);
  InputGradientBody<T, false>(dy, y, x, dx, rows, mean, a, b, k);
}

// One table of entry points per instruction set.
struct Table {
  void (*sum_float)(const float*, Rows, const float*, double*, double*);
  void (*sum_bf16)(const uint16_t*, Rows, const float*, double*, double*);
  void (*normalize_float)(const float*, const float*, float*, Rows, const float*, const float*,
                          bool);
  void (*normalize_bf16)(const uint16_t*, const uint16_t*, uint16_t*, Rows, const float*,
                         const float*, bool);
  void (*reduce_float)(const float*, const float*, const float*, float*, Rows, const float*, bool,
                       double*, double*);
  void (*reduce_bf16)(const uint16_t*, const uint16_t*, const uint16_t*, uint16_t*, Rows,
                      const float*, bool, double*, double*);
  void (*input_float)(const float*, const float*, const float*, float*, Rows, const float*,
                      const float*, const float*, const float*, bool);
  void (*input_bf16)(const uint16_t*, const uint16_t*, const uint16_t*, uint16_t*, Rows,
                     const float*, const float*, const float*, const float*, bool);
};

// The bodies, compiled for TARGET (a GCC target attribute, or nothing).
#define ELASTIC_KERNEL_TABLE(TARGET)                                                          \
  Table {                                                                                     \
    [](const float* x, Rows rows, const float* origin, double* sum, double* square)           \
        TARGET { SumShiftedBody(x, rows, origin, sum, square); },                             \
        [](const uint16_t* x, Rows rows, const float* origin, double* sum, double* square)    \
            TARGET { SumShiftedBody(x, rows, origin, sum, square); },                         \
        [](const float* x, const float* residual, float* y, Rows rows, const float* scale,    \
           const float* shift, bool relu)                                                     \
            TARGET { NormalizeDispatch(x, residual, y, rows, scale, shift, relu); },          \
        [](const uint16_t* x, const uint16_t* residual, uint16_t* y, Rows rows,               \
           const float* scale, const float* shift, bool relu)                                 \
            TARGET { NormalizeDispatch(x, residual, y, rows, scale, shift, relu); },          \
        [](const float* dy, const float* y, const float* x, float* residual_grad, Rows rows,  \
           const float* mean, bool relu, double* sum_g, double* sum_gx) TARGET {              \
          ReduceGradientDispatch(dy, y, x, residual_grad, rows, mean, relu, sum_g, sum_gx);   \
        },                                                                                    \
        [](const uint16_t* dy, const uint16_t* y, const uint16_t* x, uint16_t* residual_grad, \
           Rows rows, const float* mean, bool relu, double* sum_g, double* sum_gx) TARGET {   \
          ReduceGradientDispatch(dy, y, x, residual_grad, rows, mean, relu, sum_g, sum_gx);   \
        },                                                                                    \
        [](const float* dy, const float* y, const float* x, float* dx, Rows rows,             \
           const float* mean, const float* a, const float* b, const float* k, bool relu)      \
            TARGET { InputGradientDispatch(dy, y, x, dx, rows, mean, a, b, k, relu); },       \
        [](const uint16_t* dy, const uint16_t* y, const uint16_t* x, uint16_t* dx, Rows rows, \
           const float* mean, const float* a, const float* b, const float* k, bool relu)      \
            TARGET { InputGradientDispatch(dy, y, x, dx, rows, mean, a, b, k, relu); },       \
  }

const Table kBaselineTable = ELASTIC_KERNEL_TABLE();
const Table kAvx2Table = ELASTIC_KERNEL_TABLE(__attribute__((target("avx2,fma"))));
const Table kAvx512Table = ELASTIC_KERNEL_TABLE(__attribute__((target("avx512f,avx2,fma"))));

const Table& TableOf(InstructionSet set) {
  switch (set) {
    case InstructionSet::kAvx512:
      return kAvx512Table;
    case InstructionSet::kAvx2:
      return kAvx2Table;
    case InstructionSet::kBaseline:
      break;
  }
  return kBaselineTable;
}

InstructionSet DetectWidest() {
  // libgcc's cpuid reading also checks that the OS saves the wider registers.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    return InstructionSet::kBaseline;
  }
  return __builtin_cpu_supports("avx512f") ? InstructionSet::kAvx512 : InstructionSet::kAvx2;
}

InstructionSet WidestOfThisCpu() {
  static const InstructionSet widest = DetectWidest();
  return widest;
}

// Initialised on first use: a model built by another file's static
// initialiser may run the kernels before this file's would have run.
std::atomic<InstructionSet>& ActiveSet() {
  static std::atomic<InstructionSet> set{WidestOfThisCpu()};
  return set;
}

const Table& Active() { return TableOf(ActiveSet().load(std::memory_order_relaxed)); }

}  // namespace

const char* InstructionSetName(InstructionSet set) {
  switch (set) {
    case InstructionSet::kAvx512:
      return "avx512";
    case InstructionSet::kAvx2:
      return "avx2";
    case InstructionSet::kBaseline:
      break;
  }
  return "baseline";
}

std::vector<InstructionSet> InstructionSetsOfThisCpu() {
  std::vector<InstructionSet> sets{InstructionSet::kBaseline};
  const InstructionSet widest = WidestOfThisCpu();
  if (widest != InstructionSet::kBaseline) sets.push_back(InstructionSet::kAvx2);
  if (widest == InstructionSet::kAvx512) sets.push_back(InstructionSet::kAvx512);
  return sets;
}

InstructionSet ActiveInstructionSet() { return ActiveSet().load(); }

void UseInstructionSet(std::optional<InstructionSet> set) {
  const InstructionSet widest = WidestOfThisCpu();
  if (set.has_value() && static_cast<int>(*set) > static_cast<int>(widest)) {
    throw std::invalid_argument(std::string("batch norm kernels: this CPU cannot run the ") +
                                InstructionSetName(*set) + " kernels (its widest is " +
                                InstructionSetName(widest) + ")");
  }
  ActiveSet().store(set.value_or(widest));
}

void SumShifted(const float* x, Rows rows, const float* origin, double* sum, double* square) {
  Active().sum_float(x, rows, origin, sum, square);
}
void SumShifted(const uint16_t* x, Rows rows, const float* origin, double* sum, double* square) {
  Active().sum_bf16(x, rows, origin, sum, square);
}

void Normalize(const float* x, const float* residual, float* y, Rows rows, const float* scale,
               const float* shift, bool relu) {
  Active().normalize_float(x, residual, y, rows, scale, shift, relu);
}
void Normalize(const uint16_t* x, const uint16_t* residual, uint16_t* y, Rows rows,
               const float* scale, const float* shift, bool relu) {
  Active().normalize_bf16(x, residual, y, rows, scale, shift, relu);
}

void ReduceGradient(const float* dy, const float* y, const float* x, float* residual_grad,
                    Rows rows, const float* mean, bool relu, double* sum_g, double* sum_gx) {
  Active().reduce_float(dy, y, x, residual_grad, rows, mean, relu, sum_g, sum_gx);
}
void ReduceGradient(const uint16_t* dy, const uint16_t* y, const uint16_t* x,
                    uint16_t* residual_grad, Rows rows, const float* mean, bool relu, double* sum_g,
                    double* sum_gx) {
  Active().reduce_bf16(dy, y, x, residual_grad, rows, mean, relu, sum_g, sum_gx);
}

void InputGradient(const float* dy, const float* y, const float* x, float* dx, Rows rows,
                   const float* mean, const float* a, const float* b, const float* k, bool relu) {
  Active().input_float(dy, y, x, dx, rows, mean, a, b, k, relu);
}
void InputGradient(const uint16_t* dy, const uint16_t* y, const uint16_t* x, uint16_t* dx,
                   Rows rows, const float* mean, const float* a, const float* b, const float* k,
                   bool relu) {
  Active().input_bf16(dy, y, x, dx, rows, mean, a, b, k, relu);
}

float Bf16ToFloat(uint16_t bits) { return Load(&bits); }

uint16_t FloatToBf16(float value) {
  uint16_t bits;
  Store(&bits, value);
  return bits;
}

}  // namespace elastic::models::kernels
