#pragma once
// E8M0, the MX block scale: an unsigned biased exponent, value 2^(code - 127)
// for codes 0..254 (2^-127 .. 2^127), 0xFF = NaN, no zero, no sign.
// Encoding is bit-exact with CUDA's __nv_cvt_float_to_e8m0 /
// __nv_cvt_double_to_e8m0 and decoding with __nv_cvt_e8m0_to_bf16raw.
//
// Hopper has no E8M0 conversion instruction (cvt ... ue8m0x2 needs sm_100;
// ptxas rejects it for sm_90a), so kernels for Hopper encode scales with
// integer code equivalent to this header.

#include <bit>
#include <cstdint>

#include "codegen/numerics/fp8.hpp"

namespace fp8c::numerics {

inline constexpr std::uint8_t kE8m0Nan = 0xFF;
inline constexpr std::uint8_t kE8m0MaxCode = 0xFE;  // 2^127
inline constexpr std::uint8_t kE8m0One = 0x7F;      // 2^0

// Which power of two a scale snaps to. The sign of the input is ignored (a
// scale is a magnitude), as in CUDA.
enum class E8m0Rounding : std::uint8_t {
  // Largest power of two <= |x| (cvt.rz...ue8m0x2, cudaRoundZero).
  toward_zero,
  // Smallest power of two >= |x| (cvt.rp...ue8m0x2, cudaRoundPosInf): what an
  // MX scale needs so that amax / scale never exceeds the element max.
  up,
};

// Results below 2^-127, zero included, clip to 2^-127 (code 0) in every mode.
// Overflow past 2^127 (rounding up from above 2^127, or +-Inf) gives 0xFE with
// satfinite and NaN with nosat; finite input rounded toward zero never
// overflows. NaN gives NaN.
constexpr std::uint8_t float_to_e8m0(float x, E8m0Rounding rounding, Saturation saturation) {
  const std::uint32_t magnitude = std::bit_cast<std::uint32_t>(x) & 0x7FFF'FFFFu;
  const std::uint8_t overflow = saturation == Saturation::satfinite ? kE8m0MaxCode : kE8m0Nan;
  if (magnitude > 0x7F80'0000u) return kE8m0Nan;
  if (magnitude == 0x7F80'0000u) return overflow;
  const std::uint32_t biased = magnitude >> 23;  // floor(log2|x|) + 127 for normals
  if (rounding == E8m0Rounding::toward_zero) return static_cast<std::uint8_t>(biased);
  if (biased == 0) {
    // Subnormal float: up to 2^-127 (0x00400000) clips to code 0, above it
    // rounds up to 2^-126.
    return magnitude > 0x0040'0000u ? 1 : 0;
  }
  const std::uint32_t rounded = biased + ((magnitude & 0x7F'FFFFu) != 0 ? 1u : 0u);
  return rounded > kE8m0MaxCode ? overflow : static_cast<std::uint8_t>(rounded);
}

// Same rules on a double, rounded once. One quirk, CUDA's (it narrows to float
// rounding toward zero with a sticky bit): a finite double beyond float range
// rounded toward zero gives 0xFE even with nosat, as IEEE rounding toward zero
// overflows to the largest finite value.
constexpr std::uint8_t double_to_e8m0(double x, E8m0Rounding rounding, Saturation saturation) {
  const std::uint64_t magnitude = std::bit_cast<std::uint64_t>(x) & 0x7FFF'FFFF'FFFF'FFFFull;
  const std::uint8_t overflow = saturation == Saturation::satfinite ? kE8m0MaxCode : kE8m0Nan;
  if (magnitude > 0x7FF0'0000'0000'0000ull) return kE8m0Nan;
  if (magnitude == 0x7FF0'0000'0000'0000ull) return overflow;
  if (magnitude == 0) return 0;
  // Double subnormals are far below 2^-127 and clip like zero; treating their
  // exponent as the smallest normal one keeps them there.
  const int biased = static_cast<int>(magnitude >> 52);
  int exponent = (biased == 0 ? 1 : biased) - 1023;
  const bool exact_power_of_two = biased != 0 && (magnitude & 0xF'FFFF'FFFF'FFFFull) == 0;
  if (rounding == E8m0Rounding::up && !exact_power_of_two) ++exponent;
  if (exponent < -127) return 0;
  if (exponent > 127) return rounding == E8m0Rounding::up ? overflow : kE8m0MaxCode;
  return static_cast<std::uint8_t>(exponent + 127);
}

// Exact decode to bf16 bits, as __nv_cvt_e8m0_to_bf16raw: code 0 is the bf16
// subnormal 2^-127 (0x0040), 0xFF the canonical NaN 0x7FFF.
constexpr std::uint16_t e8m0_to_bf16_bits(std::uint8_t code) {
  if (code == kE8m0Nan) return kBf16CanonicalNan;
  if (code == 0) return 0x0040;
  return static_cast<std::uint16_t>(code << 7);
}

// 2^(code - 127), exact; 0xFF gives the NaN whose bits are bf16's canonical
// NaN widened (0x7FFF0000), so this equals bf16_to_float(e8m0_to_bf16_bits()).
// Note TransformerEngine's device helper exp2f(e8m0) maps code 0 to 0.0f and
// 0xFF to +Inf instead; a kernel must not copy that if it is to match here.
constexpr float e8m0_to_float(std::uint8_t code) {
  return bf16_to_float(e8m0_to_bf16_bits(code));
}

// 2^(127 - code), exact for every code (2^127 .. 2^-127): the factor MX
// quantization multiplies elements by. NaN for 0xFF. TransformerEngine's
// exp2f_rcp returns 1 for code 0 instead of 2^127.
constexpr float e8m0_reciprocal(std::uint8_t code) {
  if (code == kE8m0Nan) return std::bit_cast<float>(0x7FFF'FFFFu);
  if (code == kE8m0MaxCode) return std::bit_cast<float>(0x0040'0000u);  // 2^-127, subnormal
  return std::bit_cast<float>(static_cast<std::uint32_t>(254 - code) << 23);
}

}  // namespace fp8c::numerics
