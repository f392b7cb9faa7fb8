#pragma once
// bf16 and fp16 <-> float, bit-exact with cvt.rn.bf16.f32 / cvt.rn.f16.f32 /
// cvt.f32.f16 and with the host code of cuda_bf16.hpp / cuda_fp16.hpp
// (__float2bfloat16, __bfloat162float, __float2half, __half2float). Layers
// take bf16 or fp16 inputs, so the CPU reference must read and write them
// exactly as the kernels do. Values travel as raw uint16_t bits.

#include <bit>
#include <cstdint>

#include "codegen/numerics/round_to_grid.hpp"

namespace fp8c::numerics {

inline constexpr std::uint16_t kBf16CanonicalNan = 0x7FFF;
inline constexpr std::uint16_t kFp16CanonicalNan = 0x7FFF;
inline constexpr std::uint16_t kFp16MaxCode = 0x7BFF;  // 65504
inline constexpr std::uint16_t kFp16Inf = 0x7C00;

// Round-to-nearest-even; finite values past bf16's max round to +-Inf as IEEE
// says. Every NaN becomes +NaN 0x7FFF (sign and payload dropped).
constexpr std::uint16_t float_to_bf16(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7FFF'FFFFu) > 0x7F80'0000u) return kBf16CanonicalNan;
  // bf16 is the top half of float, so RNE is an integer add on the bits; the
  // carry walks into the exponent (and to Inf) exactly as rounding should.
  const std::uint32_t odd = (bits >> 16) & 1u;
  return static_cast<std::uint16_t>((bits + 0x7FFFu + odd) >> 16);
}

// Exact. A NaN keeps its sign and payload (the conversion is a shift on the
// device too).
constexpr float bf16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// Round-to-nearest-even with IEEE overflow (>= 65520 -> Inf) and fp16
// subnormals kept. Every NaN becomes +NaN 0x7FFF.
constexpr std::uint16_t float_to_fp16(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t magnitude = bits & 0x7FFF'FFFFu;
  if (magnitude > 0x7F80'0000u) return kFp16CanonicalNan;
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t code = detail::round_to_grid<10, 15>(magnitude);
  return static_cast<std::uint16_t>(sign | (code > kFp16MaxCode ? kFp16Inf : code));
}

// Exact. Every NaN becomes the canonical +NaN 0x7FFFFFFF (sign and payload
// dropped), as __half2float does on the host.
constexpr float fp16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  int exponent = (bits >> 10) & 0x1F;
  std::uint32_t fraction = bits & 0x3FFu;
  if (exponent == 0x1F) {
    return std::bit_cast<float>(fraction != 0 ? 0x7FFF'FFFFu : (sign | 0x7F80'0000u));
  }
  if (exponent == 0) {
    if (fraction == 0) return std::bit_cast<float>(sign);
    // Subnormal: normalise (every fp16 subnormal is a float normal).
    exponent = 1;
    while ((fraction & 0x400u) == 0) {
      fraction <<= 1;
      --exponent;
    }
    fraction &= 0x3FFu;
  }
  const auto float_exponent = static_cast<std::uint32_t>(exponent + 127 - 15);
  return std::bit_cast<float>(sign | (float_exponent << 23) | (fraction << 13));
}

}  // namespace fp8c::numerics
