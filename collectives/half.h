// Conversions between the 16-bit float formats and float32, for backends that
// cannot reduce a 16-bit type natively (Gloo has no bfloat16, MPI has neither):
// they widen to float32, reduce, and narrow back with round-to-nearest-even.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/types.h"

namespace elastic::collectives {

float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);

// Widens `count` elements of a 16-bit `type` (kFloat16 or kBFloat16) into `out`.
void WidenToFloat(DataType type, const void* in, float* out, size_t count);
// Narrows `count` floats into `type`, rounding to nearest even.
void NarrowFromFloat(DataType type, const float* in, void* out, size_t count);

// Divides every element of `data` by `divisor` in place (the second half of kAverage
// for backends that only sum). Integers truncate toward zero.
void DivideInPlace(DataType type, void* data, size_t count, int divisor);

}  // namespace elastic::collectives
