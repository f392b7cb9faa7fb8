// MX block scales: hand-computed values, then both rules checked against their
// definitions, and TransformerEngine's float formula compared with the exact
// round-up rule.
//
// Both rules depend on an amax only through its exponent and whether its
// significand exceeds 1.75 (fraction 0x600000); every such boundary, and the
// floats either side of it, has lower half-word 0x0000, 0x0001 or 0xFFFF. So
// these sweeps take every upper half-word with a sample of lower ones that
// includes those (FloatSet's boundaries_and_sample), about 2 million floats
// per sweep, rather than all 2^31 non-negative ones: the same coverage of the
// rule in a thousandth of the time.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>

#include "codegen/numerics/scale.hpp"
#include "every_float.hpp"

namespace fp8c::numerics {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr ElemType e4m3 = ElemType::e4m3;
constexpr ElemType e5m2 = ElemType::e5m2;
constexpr MxScaleRule ocp = MxScaleRule::ocp_floor;
constexpr MxScaleRule round_up = MxScaleRule::round_up;

TEST(MxBlockScale, HandComputed) {
  // E4M3, emax 8. 448 = 1.75 * 2^8: both give X = 2^0 (code 127).
  EXPECT_EQ(mx_block_scale(448.0f, e4m3, ocp), 127);
  EXPECT_EQ(mx_block_scale(448.0f, e4m3, round_up), 127);
  // 460 = 1.797 * 2^8: OCP keeps 2^0 (460 will saturate), round-up takes 2^1.
  EXPECT_EQ(mx_block_scale(460.0f, e4m3, ocp), 127);
  EXPECT_EQ(mx_block_scale(460.0f, e4m3, round_up), 128);
  EXPECT_EQ(mx_block_scale(512.0f, e4m3, ocp), 128);
  EXPECT_EQ(mx_block_scale(512.0f, e4m3, round_up), 128);
  // 1.0: 2^(0 - 8); and 1 <= 448 * 2^-8 = 1.75 but > 448 * 2^-9.
  EXPECT_EQ(mx_block_scale(1.0f, e4m3, ocp), 119);
  EXPECT_EQ(mx_block_scale(1.0f, e4m3, round_up), 119);
  // E5M2, emax 15: 57344 = 1.75 * 2^15.
  EXPECT_EQ(mx_block_scale(57344.0f, e5m2, ocp), 127);
  EXPECT_EQ(mx_block_scale(60000.0f, e5m2, ocp), 127);
  EXPECT_EQ(mx_block_scale(60000.0f, e5m2, round_up), 128);
  EXPECT_EQ(mx_block_scale(1.0f, e5m2, ocp), 112);
  EXPECT_EQ(mx_block_scale(1.0f, e5m2, round_up), 112);
  // Clamping at 2^-127, zero, specials, and a negative amax read as |amax|.
  EXPECT_EQ(mx_block_scale(0x1p-120f, e4m3, ocp), 0);  // 2^-128 clamps
  EXPECT_EQ(mx_block_scale(0x1p-149f, e4m3, round_up), 0);
  for (const MxScaleRule rule : {ocp, round_up}) {
    EXPECT_EQ(mx_block_scale(0.0f, e4m3, rule), 0);
    EXPECT_EQ(mx_block_scale(kNan, e4m3, rule), kE8m0Nan);
    EXPECT_EQ(mx_block_scale(-448.0f, e4m3, rule), 127);
  }
  EXPECT_EQ(mx_block_scale(kInf, e4m3, ocp), kE8m0Nan);
  EXPECT_EQ(mx_block_scale(kInf, e4m3, round_up), kE8m0MaxCode);
}

// The definitions, checked in double, where 2^k and fp8_max * 2^k are exact:
//   ocp_floor: X = 2^k, k >= -127, the largest with X * 2^emax <= amax.
//   round_up:  X = 2^k, k >= -127, the smallest with amax <= fp8_max * X.
// For finite amax >= 0; code 0 (X = 2^-127) is where the clamp takes over.
const testing::FloatSet kNonNegativeFinite{.first_upper = 0,
                                           .last_upper = 0x7F7F,
                                           .lower = testing::LowerHalfWords::boundaries_and_sample};
const testing::FloatSet kNonNegative{.first_upper = 0,
                                     .last_upper = 0x7FFF,
                                     .lower = testing::LowerHalfWords::boundaries_and_sample};

constexpr double power_of_two(int k) {  // for normal doubles; no libm call in the hot loop
  return std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52);
}

bool satisfies_definition(float amax, std::uint8_t code, ElemType format, MxScaleRule rule) {
  if (code == kE8m0Nan) return false;
  const double a = amax;
  const double x = power_of_two(int{code} - 127);
  if (rule == ocp) {
    const double element_top = x * power_of_two(mx_element_emax(format));  // X * 2^emax
    return (code == 0 || element_top <= a) && a < 2 * element_top;
  }
  const double max = fp8_max(format) * x;
  return a <= max && (code == 0 || a > max / 2);
}

template <MxScaleRule kRule>
void expect_every_amax_satisfies_definition() {
  // Both formats in one pass; the result is 1 where the definition holds for
  // both, so a failure reads "ours 0 vs 1".
  const auto comparison = testing::compare_on_floats<std::uint8_t>(
      [](std::uint32_t bits) {
        const float amax = std::bit_cast<float>(bits);
        bool holds = true;
        for (const ElemType format : {e4m3, e5m2}) {
          holds &= satisfies_definition(amax, mx_block_scale(amax, format, kRule), format, kRule);
        }
        return std::uint8_t{holds};
      },
      [](std::uint32_t) { return std::uint8_t{1}; }, kNonNegativeFinite);
  EXPECT_EQ(comparison.checked, kNonNegativeFinite.size());
  EXPECT_EQ(comparison.mismatches, 0u) << comparison.describe();
}

TEST(MxBlockScaleEveryAmax, OcpFloorSatisfiesItsDefinition) {
  expect_every_amax_satisfies_definition<ocp>();
}
TEST(MxBlockScaleEveryAmax, RoundUpSatisfiesItsDefinition) {
  expect_every_amax_satisfies_definition<round_up>();
}

// TransformerEngine evaluates the round-up scale in float, as
// float_to_e8m0(amax * (1 / fp8_max), up, satfinite); the obvious alternative
// divides instead. Both equal the exact rule while amax / fp8_max is a normal
// float; below that the quotient is subnormal and may come out a binade low.
// One pass over the non-negative floats compares both (as two bytes: the
// multiply form high, the division form low) with ours in both bytes.
TEST(MxBlockScaleEveryAmax, FloatFormulasAreExactForNormalQuotients) {
  constexpr float kReciprocal = static_cast<float>(1.0 / 448.0);
  constexpr float kSubnormalQuotientLimit = 0x1p-126f * 448.0f;
  const auto comparison = testing::compare_on_floats<std::uint16_t>(
      [](std::uint32_t bits) {
        const std::uint8_t code = mx_block_scale(std::bit_cast<float>(bits), e4m3, round_up);
        return static_cast<std::uint16_t>(code << 8 | code);
      },
      [](std::uint32_t bits) {
        const float amax = std::bit_cast<float>(bits);
        const auto up = [](float scale) {
          return float_to_e8m0(scale, E8m0Rounding::up, Saturation::satfinite);
        };
        return static_cast<std::uint16_t>(up(amax * kReciprocal) << 8 | up(amax / 448.0f));
      },
      kNonNegative);
  // Few enough differences that all of them are listed, each below the limit.
  ASSERT_EQ(comparison.mismatches, comparison.first_mismatches.size()) << comparison.describe();
  for (const testing::Mismatch& m : comparison.first_mismatches) {
    EXPECT_LT(std::bit_cast<float>(m.input_bits), kSubnormalQuotientLimit) << comparison.describe();
  }
  std::cout << "float formulas (multiply, divide) differ from the exact round-up rule for "
            << comparison.mismatches
            << " amax values, all below 2^-126 * 448: " << comparison.describe() << "\n";
}

}  // namespace
}  // namespace fp8c::numerics
