// bf16 and fp16 <-> float against cuda_bf16.h / cuda_fp16.h host code: every
// float bit pattern one way, every 16-bit pattern the other.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>

#include "codegen/numerics/half.hpp"
#include "cuda_oracle.hpp"
#include "every_float.hpp"

namespace fp8c::numerics {
namespace {

using testing::compare_on_floats;

TEST(HalfEncodeEveryFloat, Bf16) {
  const auto comparison = compare_on_floats<std::uint16_t>(
      [](std::uint32_t bits) { return float_to_bf16(std::bit_cast<float>(bits)); },
      [](std::uint32_t bits) { return testing::cuda_float_to_bf16(std::bit_cast<float>(bits)); });
  EXPECT_EQ(comparison.checked, testing::FloatSet{}.size());
  EXPECT_EQ(comparison.mismatches, 0u) << comparison.describe();
}

TEST(HalfEncodeEveryFloat, Fp16) {
  const auto comparison = compare_on_floats<std::uint16_t>(
      [](std::uint32_t bits) { return float_to_fp16(std::bit_cast<float>(bits)); },
      [](std::uint32_t bits) { return testing::cuda_float_to_fp16(std::bit_cast<float>(bits)); });
  EXPECT_EQ(comparison.checked, testing::FloatSet{}.size());
  EXPECT_EQ(comparison.mismatches, 0u) << comparison.describe();
}

TEST(HalfDecode, EveryBf16AndFp16PatternMatchesCuda) {
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(bf16_to_float(bits)),
              testing::cuda_bf16_to_float_bits(bits))
        << "bf16 0x" << std::hex << b;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(fp16_to_float(bits)),
              testing::cuda_fp16_to_float_bits(bits))
        << "fp16 0x" << std::hex << b;
  }
}

// Every non-NaN half value survives float and back.
TEST(HalfDecode, EveryNonNanPatternRoundTrips) {
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    if ((b & 0x7FFF) <= 0x7F80) {
      EXPECT_EQ(float_to_bf16(bf16_to_float(bits)), bits);
    }
    if ((b & 0x7FFF) <= 0x7C00) {
      EXPECT_EQ(float_to_fp16(fp16_to_float(bits)), bits);
    }
  }
}

}  // namespace
}  // namespace fp8c::numerics
