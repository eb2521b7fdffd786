#include "collectives/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace elastic::collectives {
namespace {

TEST(HalfTest, Float16RoundTripsEveryFiniteValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / nan
    EXPECT_EQ(FloatToHalf(HalfToFloat(h)), h) << "bits " << bits;
  }
}

TEST(HalfTest, Float16KnownValuesAndRounding) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);                   // overflow to infinity
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  // 1 + 2^-11 lies halfway between 1 and the next half; ties go to even (1).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(HalfTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
}

TEST(HalfTest, DivideInPlaceTruncatesIntegersAndRoundsHalves) {
  int64_t ints[3] = {7, -7, 6};
  DivideInPlace(DataType::kInt64, ints, 3, 2);
  EXPECT_EQ(ints[0], 3);
  EXPECT_EQ(ints[1], -3);
  EXPECT_EQ(ints[2], 3);
  uint16_t halves[1] = {FloatToHalf(3.0f)};
  DivideInPlace(DataType::kFloat16, halves, 1, 2);
  EXPECT_EQ(HalfToFloat(halves[0]), 1.5f);
}

}  // namespace
}  // namespace elastic::collectives
