// float and double -> E8M0 and E8M0 -> bf16 against cuda_fp8.h.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "codegen/numerics/e8m0.hpp"
#include "cuda_oracle.hpp"
#include "every_float.hpp"

namespace fp8c::numerics {
namespace {

using testing::compare_on_floats;

template <E8m0Rounding kRounding, Saturation kSaturation>
void expect_every_float_matches_cuda() {
  const auto comparison = compare_on_floats<std::uint8_t>(
      [](std::uint32_t bits) {
        return float_to_e8m0(std::bit_cast<float>(bits), kRounding, kSaturation);
      },
      [](std::uint32_t bits) {
        return testing::cuda_float_to_e8m0(std::bit_cast<float>(bits), kRounding, kSaturation);
      });
  EXPECT_EQ(comparison.checked, testing::FloatSet{}.size());
  EXPECT_EQ(comparison.mismatches, 0u) << comparison.describe();
}

TEST(E8m0EncodeEveryFloat, UpSatfinite) {
  expect_every_float_matches_cuda<E8m0Rounding::up, Saturation::satfinite>();
}
TEST(E8m0EncodeEveryFloat, UpNosat) {
  expect_every_float_matches_cuda<E8m0Rounding::up, Saturation::nosat>();
}
TEST(E8m0EncodeEveryFloat, TowardZeroSatfinite) {
  expect_every_float_matches_cuda<E8m0Rounding::toward_zero, Saturation::satfinite>();
}
TEST(E8m0EncodeEveryFloat, TowardZeroNosat) {
  expect_every_float_matches_cuda<E8m0Rounding::toward_zero, Saturation::nosat>();
}

// Doubles: every power of two over the whole double range, a few ulps either
// side, random doubles, and the specials (NaN, Inf, zero, subnormals).
TEST(E8m0EncodeDouble, MatchesCudaAtPowersOfTwoAndRandomly) {
  std::vector<double> inputs;
  for (int exponent = -1074; exponent <= 1023; ++exponent) {
    double below = std::ldexp(1.0, exponent);
    double above = below;
    for (int step = 0; step < 3; ++step) {
      inputs.push_back(below);
      inputs.push_back(above);
      below = std::nextafter(below, 0.0);
      above = std::nextafter(above, INFINITY);
    }
  }
  std::mt19937_64 random(11);
  for (int i = 0; i < 2'000'000; ++i) inputs.push_back(std::bit_cast<double>(random()));
  std::uniform_int_distribution<int> exponent(-160, 140);
  for (int i = 0; i < 2'000'000; ++i) {
    inputs.push_back(
        std::ldexp(1.0 + static_cast<double>(random() >> 12) * 0x1p-52, exponent(random)));
  }
  inputs.insert(inputs.end(),
                {0.0, INFINITY, NAN, 0x1p-1074, 0x1.fffffffffffffp1023, 0x1p128, 0x1.ffffffp127});
  const std::size_t unsigned_count = inputs.size();
  for (std::size_t i = 0; i < unsigned_count; ++i) inputs.push_back(-inputs[i]);

  for (const E8m0Rounding rounding : {E8m0Rounding::up, E8m0Rounding::toward_zero}) {
    for (const Saturation saturation : {Saturation::satfinite, Saturation::nosat}) {
      int failures = 0;
      for (const double x : inputs) {
        const std::uint8_t ours = double_to_e8m0(x, rounding, saturation);
        const std::uint8_t cuda = testing::cuda_double_to_e8m0(x, rounding, saturation);
        if (ours == cuda) continue;
        ADD_FAILURE() << std::hexfloat << x << " rounding " << int(rounding) << " saturation "
                      << int(saturation) << ": ours 0x" << std::hex << int(ours) << " cuda 0x"
                      << int(cuda);
        if (++failures == 10) break;
      }
    }
  }
}

TEST(E8m0Decode, EveryCodeMatchesCuda) {
  for (unsigned c = 0; c <= 0xFF; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    EXPECT_EQ(e8m0_to_bf16_bits(code), testing::cuda_e8m0_to_bf16_bits(code)) << c;
    EXPECT_EQ(std::bit_cast<std::uint32_t>(e8m0_to_float(code)),
              testing::cuda_bf16_to_float_bits(testing::cuda_e8m0_to_bf16_bits(code)))
        << c;
  }
}

}  // namespace
}  // namespace fp8c::numerics
