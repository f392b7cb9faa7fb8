// Random inputs for the block quantize tests (GPU and CPU emulation).
#pragma once

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codegen/numerics/half.hpp"
#include "codegen/plan/plan.hpp"

namespace fp8c::testing {

// Raw element bits: mostly normal values of varied magnitude per row (so
// block scales differ), some zeros, subnormals, huge values; with `specials`
// also NaN and Inf.
inline std::vector<unsigned char> random_block_quantize_input(ElemType type, std::size_t rows,
                                                              std::size_t cols, bool specials,
                                                              std::mt19937& rng) {
  const std::size_t width = element_bytes(type);
  std::vector<unsigned char> bytes(rows * cols * width);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 999);
  std::uniform_real_distribution<float> exponent(-20.0f, 20.0f);
  for (std::size_t r = 0; r < rows; ++r) {
    const float row_scale = std::exp2(exponent(rng));
    for (std::size_t c = 0; c < cols; ++c) {
      float v = normal(rng) * row_scale;
      const int p = pick(rng);
      if (p < 10)
        v = 0.0f;
      else if (p < 15)
        v *= 1e-30f;
      else if (p < 18)
        v = 3e4f;
      else if (specials && p < 20)
        v = std::numeric_limits<float>::quiet_NaN();
      else if (specials && p < 22)
        v = (p & 1 ? -1 : 1) * std::numeric_limits<float>::infinity();
      const std::size_t i = r * cols + c;
      if (width == 4) {
        std::memcpy(&bytes[i * 4], &v, 4);
      } else {
        const std::uint16_t h =
            type == ElemType::bf16 ? numerics::float_to_bf16(v) : numerics::float_to_fp16(v);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
  }
  return bytes;
}

}  // namespace fp8c::testing
