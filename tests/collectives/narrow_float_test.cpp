// The 16-bit float conversions the reductions round through, against the
// compiler's _Float16 and an independent bfloat16 rounding.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "collectives/narrow_float.hpp"
#include "serial_reference.hpp"

namespace fp8c::collectives::testing {
namespace {

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

TEST(NarrowFloatTest, Float16ToFloatIsExactForAllPatterns) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    ASSERT_TRUE(same_float(float16_to_float(h), reference_fp16_to_float(h))) << std::hex << bits;
  }
}

TEST(NarrowFloatTest, Float16RoundTripsEveryNonNanPattern) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    if (std::isnan(float16_to_float(h))) continue;
    ASSERT_EQ(float_to_float16_rne(float16_to_float(h)), h) << std::hex << bits;
  }
}

// Every rounding boundary: for each float16 value, the exact midpoint to the
// next one (a tie) and the floats just either side of it.
TEST(NarrowFloatTest, FloatToFloat16RoundsToNearestEvenAtEveryBoundary) {
  for (std::uint32_t bits = 0; bits < 0x7C00; ++bits) {
    for (const float sign : {1.0f, -1.0f}) {
      const float low = float16_to_float(static_cast<std::uint16_t>(bits));
      const float high =
          bits + 1 == 0x7C00 ? 65536.0f : float16_to_float(static_cast<std::uint16_t>(bits + 1));
      const float mid = sign * (low + (high - low) / 2);  // exact in float32
      for (const float value :
           {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, sign * INFINITY), sign * low}) {
        ASSERT_EQ(float_to_float16_rne(value), reference_float_to_fp16(value))
            << "value " << value << " from float16 pattern " << std::hex << bits;
      }
    }
  }
}

TEST(NarrowFloatTest, FloatToFloat16MatchesCompilerOnStridedSweep) {
  for (std::uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 0x1001) {
    const float value = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    if (std::isnan(value)) {
      const std::uint16_t h = float_to_float16_rne(value);
      ASSERT_TRUE(std::isnan(float16_to_float(h)));
      ASSERT_EQ(h & 0x8000u, (static_cast<std::uint32_t>(bits) >> 16) & 0x8000u);
      continue;
    }
    ASSERT_EQ(float_to_float16_rne(value), reference_float_to_fp16(value)) << std::hex << bits;
  }
}

TEST(NarrowFloatTest, FloatToBFloat16MatchesReferenceOnStridedSweepAndTies) {
  for (std::uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 0x0FFF) {
    const float value = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16_rne(value))));
      continue;
    }
    ASSERT_EQ(float_to_bfloat16_rne(value), reference_float_to_bf16(value)) << std::hex << bits;
  }
  for (std::uint32_t high = 0; high < 0x7F80; ++high) {  // every finite positive bfloat16
    for (const std::uint32_t low : {0x7FFFu, 0x8000u, 0x8001u}) {
      const float value = std::bit_cast<float>((high << 16) | low);
      ASSERT_EQ(float_to_bfloat16_rne(value), reference_float_to_bf16(value)) << std::hex << high;
    }
  }
}

TEST(NarrowFloatTest, SpecialValues) {
  EXPECT_EQ(float_to_bfloat16_rne(INFINITY), 0x7F80);
  EXPECT_EQ(float_to_bfloat16_rne(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bfloat16_rne(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // overflow
  // A NaN whose payload lives only in the low bits stays NaN, not infinity.
  EXPECT_EQ(float_to_bfloat16_rne(std::bit_cast<float>(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(float_to_float16_rne(65519.99f), 0x7BFF);
  EXPECT_EQ(float_to_float16_rne(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_float16_rne(0x1p-25f), 0x0000);  // tie with zero: even
  EXPECT_EQ(float_to_float16_rne(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_float16_rne(-0x1.8p-24f), 0x8002);  // 1.5 units: tie to even 2
}

}  // namespace
}  // namespace fp8c::collectives::testing
