// FP8 -> fp16 / float against __nv_cvt_fp8_to_halfraw, for all 256 codes.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>

#include "codegen/numerics/fp8.hpp"
#include "cuda_oracle.hpp"

namespace fp8c::numerics {
namespace {

TEST(Fp8Decode, EveryCodeMatchesCudaHalfAndFloat) {
  for (const ElemType format : {ElemType::e4m3, ElemType::e5m2}) {
    for (unsigned c = 0; c <= 0xFF; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      EXPECT_EQ(fp8_to_half_bits(code, format), testing::cuda_fp8_to_half_bits(code, format))
          << "format " << int(format) << " code 0x" << std::hex << c;
      EXPECT_EQ(std::bit_cast<std::uint32_t>(fp8_to_float(code, format)),
                testing::cuda_fp8_to_float_bits(code, format))
          << "format " << int(format) << " code 0x" << std::hex << c;
    }
  }
}

// Decoding then encoding gives the code back for every non-NaN code, in both
// saturation modes (nothing decoded is out of range). CUDA agrees.
TEST(Fp8Decode, EveryNonNanCodeRoundTrips) {
  for (const ElemType format : {ElemType::e4m3, ElemType::e5m2}) {
    for (unsigned c = 0; c <= 0xFF; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      if (fp8_is_nan(code, format)) continue;
      const float value = fp8_to_float(code, format);
      EXPECT_EQ(float_to_fp8(value, format, Saturation::nosat), code);
      const bool is_inf = format == ElemType::e5m2 && (c & 0x7F) == kE5m2Inf;
      if (!is_inf) {
        EXPECT_EQ(float_to_fp8(value, format, Saturation::satfinite), code);
      }
      EXPECT_EQ(testing::cuda_float_to_fp8(value, format, Saturation::nosat), code);
    }
  }
}

}  // namespace
}  // namespace fp8c::numerics
