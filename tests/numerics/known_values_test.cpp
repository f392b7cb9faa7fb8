// Hand-checked conversions: the cases a reader wants to see spelled out.
// Compile-time checks (static_assert) show the conversions are constexpr.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "codegen/numerics/e8m0.hpp"
#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"

namespace fp8c::numerics {
namespace {

constexpr ElemType e4m3 = ElemType::e4m3;
constexpr ElemType e5m2 = ElemType::e5m2;
constexpr Saturation sat = Saturation::satfinite;
constexpr Saturation nosat = Saturation::nosat;

// E4M3: 448 is the max; 464 (half way to the would-be 480) ties to even 448;
// anything above saturates, or becomes NaN (keeping the sign) without sat.
static_assert(float_to_fp8(1.0f, e4m3, sat) == 0x38);
static_assert(float_to_fp8(448.0f, e4m3, sat) == 0x7E);
static_assert(float_to_fp8(464.0f, e4m3, nosat) == 0x7E);
static_assert(float_to_fp8(464.00003f, e4m3, sat) == 0x7E);
static_assert(float_to_fp8(464.00003f, e4m3, nosat) == 0x7F);
static_assert(float_to_fp8(-1000.0f, e4m3, nosat) == 0xFF);
static_assert(float_to_fp8(-INFINITY, e4m3, sat) == 0xFE);
// E5M2: 57344 is the max (odd mantissa 11), so its midpoint 61440 ties to the
// even code above, Inf: it overflows.
static_assert(float_to_fp8(57344.0f, e5m2, nosat) == 0x7B);
static_assert(float_to_fp8(61439.996f, e5m2, nosat) == 0x7B);
static_assert(float_to_fp8(61440.0f, e5m2, nosat) == 0x7C);
static_assert(float_to_fp8(61440.0f, e5m2, sat) == 0x7B);
static_assert(float_to_fp8(-INFINITY, e5m2, nosat) == 0xFC);
static_assert(float_to_fp8(-INFINITY, e5m2, sat) == 0xFB);
// Subnormals: E4M3's smallest is 2^-9. Half of it ties to even (zero), a hair
// more rounds up; 3 * 2^-10 ties between codes 1 and 2 and goes to 2.
static_assert(float_to_fp8(0x1p-9f, e4m3, sat) == 0x01);
static_assert(float_to_fp8(0x1p-10f, e4m3, sat) == 0x00);
static_assert(float_to_fp8(0x1.000002p-10f, e4m3, sat) == 0x01);
static_assert(float_to_fp8(0x3p-10f, e4m3, sat) == 0x02);
static_assert(float_to_fp8(0x1p-16f, e5m2, sat) == 0x01);
static_assert(float_to_fp8(-0.0f, e4m3, sat) == 0x80);
static_assert(float_to_fp8(-0x1p-30f, e5m2, sat) == 0x80);  // underflow keeps the sign
// The largest subnormal rounds up into the smallest normal across the seam.
static_assert(float_to_fp8(0x1.ep-7f, e4m3, sat) == 0x08);

static_assert(fp8_to_float(0x01, e4m3) == 0x1p-9f);
static_assert(fp8_to_float(0x08, e4m3) == 0x1p-6f);
static_assert(fp8_to_float(0x7E, e4m3) == 448.0f);
static_assert(fp8_to_float(0xB8, e4m3) == -1.0f);
static_assert(fp8_to_float(0x01, e5m2) == 0x1p-16f);
static_assert(fp8_to_float(0x7B, e5m2) == 57344.0f);
static_assert(fp8_to_float(0xFC, e5m2) == -INFINITY);
static_assert(fp8_to_half_bits(0x38, e4m3) == 0x3C00);
static_assert(fp8_to_half_bits(0x3C, e5m2) == 0x3C00);

static_assert(float_to_bf16(1.0f) == 0x3F80);
static_assert(float_to_bf16(0x1.018p0f) == 0x3F81);  // above the midpoint: up
static_assert(float_to_bf16(0x1.01p0f) == 0x3F80);   // midpoint, even below: down
static_assert(float_to_bf16(0x1.03p0f) == 0x3F82);   // midpoint, odd below: up
static_assert(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds to Inf
static_assert(float_to_fp16(65504.0f) == 0x7BFF);
static_assert(float_to_fp16(65519.996f) == 0x7BFF);
static_assert(float_to_fp16(65520.0f) == 0x7C00);
static_assert(float_to_fp16(0x1p-24f) == 0x0001);
static_assert(float_to_fp16(0x1p-25f) == 0x0000);
static_assert(fp16_to_float(0x0001) == 0x1p-24f);
static_assert(fp16_to_float(0xFBFF) == -65504.0f);

// E8M0: a scale's magnitude snaps to a power of two.
constexpr E8m0Rounding up = E8m0Rounding::up;
constexpr E8m0Rounding down = E8m0Rounding::toward_zero;
static_assert(float_to_e8m0(1.0f, up, sat) == 0x7F);
static_assert(float_to_e8m0(1.5f, up, sat) == 0x80);
static_assert(float_to_e8m0(1.5f, down, sat) == 0x7F);
static_assert(float_to_e8m0(-3.0f, up, sat) == 0x81);            // the sign is ignored
static_assert(float_to_e8m0(0.0f, up, sat) == 0x00);             // clips to 2^-127
static_assert(float_to_e8m0(0x1p-127f, up, sat) == 0x00);        // exactly 2^-127
static_assert(float_to_e8m0(0x1.00001p-127f, up, sat) == 0x01);  // subnormal just above
static_assert(float_to_e8m0(0x1.000002p127f, up, sat) == 0xFE);
static_assert(float_to_e8m0(0x1.000002p127f, up, nosat) == 0xFF);
static_assert(float_to_e8m0(INFINITY, down, sat) == 0xFE);
static_assert(float_to_e8m0(INFINITY, down, nosat) == 0xFF);
static_assert(double_to_e8m0(0x1p200, down, nosat) == 0xFE);  // CUDA's quirk, see header
static_assert(e8m0_to_float(0x7F) == 1.0f);
static_assert(e8m0_to_float(0x00) == 0x1p-127f);
static_assert(e8m0_to_float(0xFE) == 0x1p127f);
static_assert(e8m0_reciprocal(0x00) == 0x1p127f);
static_assert(e8m0_reciprocal(0x80) == 0.5f);
static_assert(e8m0_reciprocal(0xFE) == 0x1p-127f);

TEST(KnownValues, NansAreCanonical) {
  const float negative_nan = -std::numeric_limits<float>::quiet_NaN();
  const float signalling = std::numeric_limits<float>::signaling_NaN();
  for (const ElemType format : {e4m3, e5m2}) {
    for (const Saturation saturation : {sat, nosat}) {
      EXPECT_EQ(float_to_fp8(negative_nan, format, saturation), 0x7F);
      EXPECT_EQ(float_to_fp8(signalling, format, saturation), 0x7F);
    }
    EXPECT_EQ(std::bit_cast<std::uint32_t>(fp8_to_float(0xFF, format)), 0x7FFF'FFFFu);
    EXPECT_EQ(fp8_to_half_bits(0xFF, format), 0x7FFF);
  }
  // Doubles keep the sign, and E5M2 the second payload bit (CUDA's rule).
  EXPECT_EQ(double_to_fp8(-std::numeric_limits<double>::quiet_NaN(), e4m3, sat), 0xFF);
  EXPECT_EQ(double_to_fp8(-std::numeric_limits<double>::quiet_NaN(), e5m2, sat), 0xFE);
  EXPECT_EQ(double_to_fp8(std::bit_cast<double>(0x7FFC'0000'0000'0000ull), e5m2, sat), 0x7F);
  EXPECT_TRUE(fp8_is_nan(0x7D, e5m2));
  EXPECT_FALSE(fp8_is_nan(0x7C, e5m2));
  EXPECT_FALSE(fp8_is_nan(0x7E, e4m3));

  EXPECT_EQ(float_to_bf16(negative_nan), 0x7FFF);
  EXPECT_EQ(float_to_fp16(negative_nan), 0x7FFF);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(bf16_to_float(0xFFC1)), 0xFFC1'0000u);  // kept
  EXPECT_EQ(std::bit_cast<std::uint32_t>(fp16_to_float(0xFE01)), 0x7FFF'FFFFu);  // canonical
  EXPECT_EQ(float_to_e8m0(negative_nan, up, sat), 0xFF);
  EXPECT_TRUE(std::isnan(e8m0_to_float(0xFF)));
  EXPECT_TRUE(std::isnan(e8m0_reciprocal(0xFF)));
}

}  // namespace
}  // namespace fp8c::numerics
