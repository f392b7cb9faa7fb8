// float and double -> FP8 against __nv_cvt_float_to_fp8 / __nv_cvt_double_to_fp8.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "codegen/numerics/fp8.hpp"
#include "cuda_oracle.hpp"
#include "every_float.hpp"

namespace fp8c::numerics {
namespace {

using testing::compare_on_floats;
using testing::cuda_double_to_fp8;
using testing::cuda_float_to_fp8;

template <ElemType kFormat, Saturation kSaturation>
void expect_every_float_matches_cuda() {
  const auto comparison = compare_on_floats<std::uint8_t>(
      [](std::uint32_t bits) {
        return float_to_fp8(std::bit_cast<float>(bits), kFormat, kSaturation);
      },
      [](std::uint32_t bits) {
        return cuda_float_to_fp8(std::bit_cast<float>(bits), kFormat, kSaturation);
      });
  EXPECT_EQ(comparison.checked, testing::FloatSet{}.size());
  EXPECT_EQ(comparison.mismatches, 0u) << comparison.describe();
}

TEST(Fp8EncodeEveryFloat, E4m3Satfinite) {
  expect_every_float_matches_cuda<ElemType::e4m3, Saturation::satfinite>();
}
TEST(Fp8EncodeEveryFloat, E4m3Nosat) {
  expect_every_float_matches_cuda<ElemType::e4m3, Saturation::nosat>();
}
TEST(Fp8EncodeEveryFloat, E5m2Satfinite) {
  expect_every_float_matches_cuda<ElemType::e5m2, Saturation::satfinite>();
}
TEST(Fp8EncodeEveryFloat, E5m2Nosat) {
  expect_every_float_matches_cuda<ElemType::e5m2, Saturation::nosat>();
}

// Doubles cannot be enumerated, so the double path is checked where rounding
// decides: at every midpoint between adjacent FP8 magnitudes (including the
// one past the max, where overflow starts, and the one below the smallest
// subnormal), a few double ulps either side, and at offsets too small for
// float to see (m + tiny rounds to m in float, then ties to even: the
// double-rounding trap a float detour falls into). Then random doubles near
// and far from the FP8 range, and NaNs with every sign and top payload bits.
std::vector<double> double_inputs(ElemType format) {
  std::vector<double> inputs;
  std::vector<double> magnitudes;
  for (unsigned code = 0; code <= 0x7F; ++code) {
    const float value = fp8_to_float(static_cast<std::uint8_t>(code), format);
    if (std::isfinite(value)) magnitudes.push_back(value);
  }
  // One step past the max, as if the format continued: 480 / 65536.
  magnitudes.push_back(format == ElemType::e4m3 ? 480.0 : 65536.0);
  for (std::size_t i = 0; i + 1 < magnitudes.size(); ++i) {
    const double midpoint = (magnitudes[i] + magnitudes[i + 1]) / 2;  // exact in double
    for (const double point : {magnitudes[i], midpoint}) {
      double below = point;
      double above = point;
      for (int step = 0; step < 4; ++step) {
        inputs.push_back(below);
        inputs.push_back(above);
        below = std::nextafter(below, 0.0);
        above = std::nextafter(above, 1e300);
      }
      for (const double relative : {0x1p-30, 0x1p-40, 0x1p-50}) {
        inputs.push_back(point * (1 + relative));
        inputs.push_back(point * (1 - relative));
      }
    }
  }
  std::mt19937_64 random(7);
  std::uniform_int_distribution<int> exponent(-40, 20);
  for (int i = 0; i < 2'000'000; ++i) {
    const std::uint64_t mantissa = random() & 0xF'FFFF'FFFF'FFFFull;
    const auto biased = static_cast<std::uint64_t>(exponent(random) + 1023);
    inputs.push_back(std::bit_cast<double>((biased << 52) | mantissa));
  }
  for (int i = 0; i < 1'000'000; ++i) inputs.push_back(std::bit_cast<double>(random()));
  for (const std::uint64_t bits :
       {0x7FF0'0000'0000'0000ull, 0x7FF8'0000'0000'0000ull, 0x7FF4'0000'0000'0000ull,
        0x7FFC'0000'0000'0000ull, 0x7FF0'0000'0000'0001ull, 0x7FFF'FFFF'FFFF'FFFFull,
        0x0000'0000'0000'0001ull, 0x7FEF'FFFF'FFFF'FFFFull, 0x0000'0000'0000'0000ull}) {
    inputs.push_back(std::bit_cast<double>(bits));
  }
  const std::size_t unsigned_count = inputs.size();
  for (std::size_t i = 0; i < unsigned_count; ++i) inputs.push_back(-inputs[i]);
  return inputs;
}

TEST(Fp8EncodeDouble, MatchesCudaAtBoundariesAndRandomly) {
  for (const ElemType format : {ElemType::e4m3, ElemType::e5m2}) {
    const std::vector<double> inputs = double_inputs(format);
    for (const Saturation saturation : {Saturation::satfinite, Saturation::nosat}) {
      int failures = 0;
      for (const double x : inputs) {
        const std::uint8_t ours = double_to_fp8(x, format, saturation);
        const std::uint8_t cuda = cuda_double_to_fp8(x, format, saturation);
        if (ours == cuda) continue;
        ADD_FAILURE() << std::hexfloat << x << " (0x" << std::hex << std::bit_cast<std::uint64_t>(x)
                      << ") format " << int(format) << " saturation " << int(saturation)
                      << ": ours 0x" << int(ours) << " cuda 0x" << int(cuda);
        if (++failures == 10) break;
      }
    }
  }
}

// Rounding once matters: these doubles round differently through float.
TEST(Fp8EncodeDouble, RoundsOnceNotThroughFloat) {
  // Just above the E4M3 midpoint 1.0625 between 1.0 and 1.125, but closer to
  // it than float can resolve: float rounds it onto the midpoint, which then
  // ties to even (1.0); rounding once gives 1.125.
  const double x = 1.0625 + 0x1p-40;
  ASSERT_EQ(static_cast<float>(x), 1.0625f);
  EXPECT_EQ(float_to_fp8(static_cast<float>(x), ElemType::e4m3, Saturation::satfinite), 0x38);
  EXPECT_EQ(double_to_fp8(x, ElemType::e4m3, Saturation::satfinite), 0x39);
  EXPECT_EQ(cuda_double_to_fp8(x, ElemType::e4m3, Saturation::satfinite), 0x39);
}

}  // namespace
}  // namespace fp8c::numerics
