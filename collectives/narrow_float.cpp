#include "collectives/narrow_float.hpp"

#include <bit>

namespace fp8c::collectives {
namespace {

constexpr std::uint32_t kFloatAbsMask = 0x7FFF'FFFFu;
constexpr std::uint32_t kFloatInfinity = 0x7F80'0000u;

// Rounds `value >> shift` to nearest, ties to even, looking at the bits that
// are shifted out.
std::uint32_t shift_right_rne(std::uint32_t value, unsigned shift) {
  const std::uint32_t kept = value >> shift;
  const std::uint32_t dropped = value & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  const bool round_up = dropped > half || (dropped == half && (kept & 1u) != 0);
  return kept + (round_up ? 1u : 0u);
}

}  // namespace

float bfloat16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t float_to_bfloat16_rne(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & kFloatAbsMask) > kFloatInfinity) {
    // NaN: keep sign and top payload bits, force the quiet bit so a payload
    // that lived only in the low 16 bits cannot turn into infinity.
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  // Both carries are wanted: a mantissa carry bumps the exponent, and the
  // largest finite values round up to infinity.
  return static_cast<std::uint16_t>(shift_right_rne(bits, 16));
}

float float16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
  const std::uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) {  // infinity or NaN (NaN made quiet, payload kept)
    const std::uint32_t quiet = mantissa != 0 ? 0x0040'0000u : 0u;
    return std::bit_cast<float>(sign | kFloatInfinity | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

std::uint16_t float_to_float16_rne(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & kFloatAbsMask;
  if (magnitude > kFloatInfinity) {  // NaN: quiet, top payload bits kept
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  // 65520 = 0x477FF000 is halfway between 65504 (largest float16, odd
  // mantissa) and 2^16, so it and everything above round to infinity.
  if (magnitude >= 0x477F'F000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
  const std::uint32_t exponent = magnitude >> 23;
  if (exponent < 113) {
    // Below 2^-14: a float16 subnormal (or zero), counted in units of 2^-24.
    // value = significand * 2^(exponent - 150) = significand >> (126 - exponent) units.
    if (exponent == 0) return sign;  // float32 subnormals are far below 2^-25
    const std::uint32_t significand = (magnitude & 0x7F'FFFFu) | 0x80'0000u;
    const unsigned shift = 126u - exponent;
    if (shift > 24) return sign;  // below half the smallest subnormal
    // A carry out of the subnormal range yields 0x400, the smallest normal.
    return static_cast<std::uint16_t>(sign | shift_right_rne(significand, shift));
  }
  // Normal: rebias the exponent (127 -> 15) and round 23 mantissa bits to 10;
  // a mantissa carry correctly bumps the exponent.
  const std::uint32_t rebiased = magnitude - (112u << 23);
  return static_cast<std::uint16_t>(sign | shift_right_rne(rebiased, 13));
}

}  // namespace fp8c::collectives
