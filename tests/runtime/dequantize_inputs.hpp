// Random dequantize inputs, shared by the GPU test (dequantize_gpu_test.cpp,
// both backends) and the CPU emulation of the kernel's IR
// (tests/emulation/dequantize_emulation_test.cpp): every FP8 code, scales
// with the special values a scale can take.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "codegen/kernels/dequantize.hpp"

namespace fp8c::testing {

// n FP8 codes, every one of the 256 among them where n allows, shuffled (at
// least one byte, so that an empty tensor still has an address).
inline std::vector<std::uint8_t> random_codes(std::size_t n, std::mt19937& rng) {
  std::vector<std::uint8_t> bytes(std::max<std::size_t>(n, 1));
  for (std::size_t i = 0; i < n; ++i)
    bytes[i] = i < 256 ? static_cast<std::uint8_t>(i) : static_cast<std::uint8_t>(rng());
  std::shuffle(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n), rng);
  return bytes;
}

// A scale_inv: one in 16 a special (NaN, +-Inf, 0, a subnormal, negative,
// huge, tiny), else 2^[-30, 30) times [1, 2).
inline float random_scale(std::mt19937& rng) {
  const float specials[] = {std::bit_cast<float>(0x7FC00000u), INFINITY, -INFINITY, 0.0f,
                            std::bit_cast<float>(0x00000003u), -2.5f,    3e38f,     1e-38f};
  if (rng() % 16 == 0) return specials[rng() % 8];
  return std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng),
                    static_cast<int>(rng() % 60) - 30);
}

// The block scale tensor's raw bytes: fp32 scale_invs, or E8M0 codes within
// 2^+-20 with 0x00, 0x7F, 0xFE and 0xFF among them.
inline std::vector<std::uint8_t> random_scales(const DequantizeKernel& k, std::int64_t count,
                                               std::mt19937& rng) {
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(count, 1));
  if (k.scaling == Scaling::mx_1x32) {
    std::vector<std::uint8_t> codes(n);
    const std::uint8_t specials[] = {0x00, 0x7F, 0xFE, 0xFF};
    for (std::size_t i = 0; i < n; ++i)
      codes[i] = i < 4 ? specials[i] : static_cast<std::uint8_t>(127 - 20 + rng() % 41);
    std::shuffle(codes.begin(), codes.end(), rng);
    return codes;
  }
  std::vector<std::uint8_t> bytes(n * 4);
  for (std::int64_t i = 0; i < count; ++i) {
    const float v = random_scale(rng);
    std::memcpy(&bytes[static_cast<std::size_t>(i) * 4], &v, 4);
  }
  return bytes;
}

}  // namespace fp8c::testing
