// Per-tensor and blockwise scale math, with hand-computed expectations.
#include "codegen/numerics/scale.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

namespace fp8c::numerics {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kFloatMax = std::numeric_limits<float>::max();
constexpr ElemType e4m3 = ElemType::e4m3;
constexpr ElemType e5m2 = ElemType::e5m2;

TEST(ScaleFromAmax, IsFp8MaxOverAmax) {
  EXPECT_EQ(scale_from_amax(448.0f, e4m3, 1.0f), 1.0f);
  EXPECT_EQ(scale_from_amax(1.0f, e4m3, 1.0f), 448.0f);
  EXPECT_EQ(scale_from_amax(1.0f, e5m2, 1.0f), 57344.0f);
  // 448 / 3 = 149.333... = 0x1.2AAAAAp7 after rounding to nearest (the next
  // digit, ...AA|AA..., is below half).
  EXPECT_EQ(std::bit_cast<std::uint32_t>(scale_from_amax(3.0f, e4m3, 1.0f)), 0x4315'5555u);
}

TEST(ScaleFromAmax, MarginDividesByPowersOfTwo) {
  EXPECT_EQ(scale_from_amax(448.0f, e4m3, 1.0f, {.margin = 1}), 0.5f);
  EXPECT_EQ(scale_from_amax(7.0f, e4m3, 1.0f, {.margin = 2}), 16.0f);  // 448 / 7 / 4
  EXPECT_EQ(scale_from_amax(448.0f, e4m3, 1.0f, {.margin = -1}), 2.0f);
}

// Nothing can be learnt from a zero, negative, Inf or NaN amax: the caller's
// fallback (the previous scale, or 1.0) comes back untouched.
TEST(ScaleFromAmax, UnusableAmaxGivesTheFallback) {
  for (const float amax : {0.0f, -0.0f, -1.0f, kInf, -kInf, kNan}) {
    EXPECT_EQ(scale_from_amax(amax, e4m3, 3.5f), 3.5f) << amax;
    EXPECT_EQ(scale_from_amax(amax, e4m3, 3.5f, {.power_of_two = true}), 3.5f) << amax;
  }
}

TEST(ScaleFromAmax, AmaxFloorRaisesSmallAmaxes) {
  const ScaleRule floor_half{.amax_floor = 0.5f};
  EXPECT_EQ(scale_from_amax(0.0f, e4m3, 1.0f, floor_half), 896.0f);
  EXPECT_EQ(scale_from_amax(0.25f, e4m3, 1.0f, floor_half), 896.0f);
  EXPECT_EQ(scale_from_amax(1.0f, e4m3, 1.0f, floor_half), 448.0f);
  EXPECT_EQ(scale_from_amax(kNan, e4m3, 1.0f, floor_half), 1.0f);  // NaN is not "small"
}

// 448 * 2^120 = 1.75 * 2^128 overflows float: the scale becomes FLT_MAX.
TEST(ScaleFromAmax, TinyAmaxGivesFloatMax) {
  EXPECT_EQ(scale_from_amax(0x1p-120f, e4m3, 1.0f), kFloatMax);
  EXPECT_EQ(scale_from_amax(0x1p-120f, e4m3, 1.0f, {.power_of_two = true}), 0x1p127f);
}

TEST(ScaleFromAmax, PowerOfTwoRoundsDown) {
  const ScaleRule pow2{.power_of_two = true};
  EXPECT_EQ(scale_from_amax(3.0f, e4m3, 1.0f, pow2), 128.0f);  // 149.33 -> 128
  EXPECT_EQ(scale_from_amax(448.0f, e4m3, 1.0f, pow2), 1.0f);
  EXPECT_EQ(scale_from_amax(500.0f, e4m3, 1.0f, pow2), 0.5f);  // 0.896 -> 0.5
  EXPECT_EQ(scale_from_amax(1.0f, e5m2, 1.0f, pow2), 32768.0f);
}

TEST(RoundDownToPowerOfTwo, KeepsTheLeadingBit) {
  EXPECT_EQ(round_down_to_power_of_two(1.0f), 1.0f);
  EXPECT_EQ(round_down_to_power_of_two(1.9999999f), 1.0f);
  EXPECT_EQ(round_down_to_power_of_two(3.0f), 2.0f);
  EXPECT_EQ(round_down_to_power_of_two(0.75f), 0.5f);
  EXPECT_EQ(round_down_to_power_of_two(kFloatMax), 0x1p127f);
  EXPECT_EQ(round_down_to_power_of_two(0x3p-149f), 0x1p-148f);  // subnormal
  EXPECT_EQ(round_down_to_power_of_two(0.0f), 0.0f);
  EXPECT_EQ(round_down_to_power_of_two(kInf), kInf);
}

TEST(ScaleInverse, IsOneOverScale) {
  EXPECT_EQ(scale_inverse(4.0f), 0.25f);
  EXPECT_EQ(scale_inverse(448.0f), 1.0f / 448.0f);
}

TEST(DelayedScalingUpdate, UsesTheHistoryAndKeepsThePreviousScaleOnNan) {
  const std::vector<float> history = {2.0f, 7.0f, 1.0f};  // history[0] is the latest
  EXPECT_EQ(delayed_scaling_update(history, AmaxHistoryRule::max, e4m3, 0, 5.0f), 64.0f);
  EXPECT_EQ(delayed_scaling_update(history, AmaxHistoryRule::most_recent, e4m3, 0, 5.0f), 224.0f);
  EXPECT_EQ(delayed_scaling_update(history, AmaxHistoryRule::max, e4m3, 1, 5.0f), 32.0f);
  const std::vector<float> with_nan = {2.0f, kNan};
  EXPECT_EQ(delayed_scaling_update(with_nan, AmaxHistoryRule::max, e4m3, 0, 5.0f), 5.0f);
  const std::vector<float> zeros = {0.0f, 0.0f};
  EXPECT_EQ(delayed_scaling_update(zeros, AmaxHistoryRule::max, e4m3, 0, 5.0f), 5.0f);
  EXPECT_EQ(delayed_scaling_update({}, AmaxHistoryRule::max, e4m3, 0, 5.0f), 5.0f);
}

TEST(BlockwiseScale, IsFp8MaxOverBlockAmaxOrOne) {
  EXPECT_EQ(blockwise_scale(224.0f, e4m3, false), 2.0f);
  EXPECT_EQ(blockwise_scale(300.0f, e4m3, true), 1.0f);    // 1.4933 -> 1
  EXPECT_EQ(blockwise_scale(1000.0f, e5m2, true), 32.0f);  // 57.344 -> 32
  EXPECT_EQ(blockwise_scale(0.0f, e4m3, false), 1.0f);
  EXPECT_EQ(blockwise_scale(kNan, e4m3, true), 1.0f);
  EXPECT_EQ(blockwise_scale(0.0f, e4m3, false, 1e-4f), 448.0f / 1e-4f);
}

}  // namespace
}  // namespace fp8c::numerics
