#include "collectives/half.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace elastic::collectives {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    // Zero or subnormal: value = mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return BitsToFloat(sign | 0x7f800000 | (mantissa << 13));  // inf/nan
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs_bits = bits & 0x7fffffff;
  if (abs_bits >= 0x7f800000) {  // inf or nan
    return sign | 0x7c00 | (abs_bits > 0x7f800000 ? 0x200 : 0);
  }
  const float magnitude = BitsToFloat(abs_bits);
  if (magnitude >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (magnitude < 6.103515625e-05f) {
    // Subnormal half: round magnitude / 2^-24 to the nearest integer (ties to even).
    const float scaled = std::nearbyint(std::ldexp(magnitude, 24));
    return sign | static_cast<uint16_t>(scaled);
  }
  // Normal: drop 13 mantissa bits with round-to-nearest-even.
  uint32_t rebased = abs_bits - (112u << 23);
  const uint32_t lsb = (rebased >> 13) & 1;
  rebased += 0xfff + lsb;
  return sign | static_cast<uint16_t>(rebased >> 13);
}

float BFloat16ToFloat(uint16_t bits) { return BitsToFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToBFloat16(float value) {
  uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // nan
  const uint32_t lsb = (bits >> 16) & 1;
  bits += 0x7fff + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

void WidenToFloat(DataType type, const void* in, float* out, size_t count) {
  const auto* src = static_cast<const uint16_t*>(in);
  if (type == DataType::kFloat16) {
    for (size_t i = 0; i < count; ++i) out[i] = HalfToFloat(src[i]);
  } else if (type == DataType::kBFloat16) {
    for (size_t i = 0; i < count; ++i) out[i] = BFloat16ToFloat(src[i]);
  } else {
    throw std::invalid_argument(std::string("WidenToFloat: not a 16-bit type: ") +
                                DataTypeName(type));
  }
}

void NarrowFromFloat(DataType type, const float* in, void* out, size_t count) {
  auto* dst = static_cast<uint16_t*>(out);
  if (type == DataType::kFloat16) {
    for (size_t i = 0; i < count; ++i) dst[i] = FloatToHalf(in[i]);
  } else if (type == DataType::kBFloat16) {
    for (size_t i = 0; i < count; ++i) dst[i] = FloatToBFloat16(in[i]);
  } else {
    throw std::invalid_argument(std::string("NarrowFromFloat: not a 16-bit type: ") +
                                DataTypeName(type));
  }
}

void DivideInPlace(DataType type, void* data, size_t count, int divisor) {
  switch (type) {
    case DataType::kFloat32: {
      auto* p = static_cast<float*>(data);
      const float d = static_cast<float>(divisor);
      for (size_t i = 0; i < count; ++i) p[i] /= d;
      return;
    }
    case DataType::kFloat64: {
      auto* p = static_cast<double*>(data);
      const double d = static_cast<double>(divisor);
      for (size_t i = 0; i < count; ++i) p[i] /= d;
      return;
    }
    case DataType::kInt64: {
      auto* p = static_cast<int64_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] /= divisor;
      return;
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      auto* p = static_cast<uint16_t*>(data);
      const float d = static_cast<float>(divisor);
      const bool half = type == DataType::kFloat16;
      for (size_t i = 0; i < count; ++i) {
        const float v = (half ? HalfToFloat(p[i]) : BFloat16ToFloat(p[i])) / d;
        p[i] = half ? FloatToHalf(v) : FloatToBFloat16(v);
      }
      return;
    }
  }
}

}  // namespace elastic::collectives
