#pragma once
// The MX (mxfp8) block scale: one E8M0 code per 1x32 block, from the block's
// amax. Integer code on the float's bits, so a kernel can compute exactly the
// same thing on a GPU without E8M0 conversion instructions (Hopper has none).

#include <bit>
#include <cstdint>

#include "codegen/numerics/e8m0.hpp"
#include "codegen/numerics/fp8.hpp"

namespace fp8c::numerics {

// `format`, here and below, is e4m3 or e5m2, unchecked (fp8.hpp).
// Largest exponent of the element format: 448 = 1.75 * 2^8, 57344 = 1.75 * 2^15.
constexpr int mx_element_emax(ElemType format) {
  return format == ElemType::e4m3 ? 8 : 15;
}

// Two rules for an MX block's E8M0 scale X (elements are stored as
// float_to_fp8(x * e8m0_reciprocal(X), satfinite)). They agree unless the
// amax's significand exceeds the element max's 1.75, i.e. amax in
// (1.75, 2) * 2^k, e.g. 460 for E4M3: ocp_floor gives X = 1 and 460 saturates
// to 448; round_up gives X = 2 and 460 -> 230 -> 224.
enum class MxScaleRule : std::uint8_t {
  // OCP MX v1.0 section 6.3 (and Microsoft's microxcaling reference):
  // X = 2^(floor(log2(amax)) - emax_elem), clamped below at 2^-127; amax 0 ->
  // 2^-127; NaN or Inf amax -> NaN. Keeps the most precision, may saturate
  // the largest elements.
  ocp_floor,
  // TransformerEngine's MXFP8 cast kernels: X = the smallest power of two
  // >= 2^-127 with amax <= fp8_max * X (one binade above ocp_floor when the
  // significand exceeds 1.75); amax 0 -> 2^-127, Inf -> 2^127, NaN -> NaN.
  // Never saturates. TransformerEngine evaluates it in float as
  // float_to_e8m0(amax * (1 / fp8_max), up, satfinite); tests/numerics shows
  // that, and the division form amax / fp8_max, equal this exact rule for
  // every float amax >= 2^-126 * fp8_max. Below that the quotient is a
  // subnormal float, loses bits, and can come out one binade low.
  round_up,
};

namespace detail {

// Both element maxima have significand 1.75: fraction bits .11 = 0x600000.
inline constexpr std::uint32_t kElementMaxFraction = 0x60'0000u;

// floor(log2(amax)) for finite amax > 0, and whether amax's significand
// (normalised into [1, 2), subnormals included) exceeds 1.75.
struct AmaxBinade {
  int exponent;
  bool above_element_max_significand;
};
constexpr AmaxBinade amax_binade(std::uint32_t magnitude_bits) {
  const int biased = static_cast<int>(magnitude_bits >> 23);
  std::uint32_t fraction = magnitude_bits & 0x7F'FFFFu;
  int exponent = biased - 127;
  if (biased == 0) {  // subnormal: fraction * 2^-149
    const int width = std::bit_width(magnitude_bits);
    exponent = width - 1 - 149;
    fraction = (magnitude_bits << (24 - width)) & 0x7F'FFFFu;
  }
  return {exponent, fraction > kElementMaxFraction};
}

}  // namespace detail

constexpr std::uint8_t mx_block_scale(float block_amax, ElemType format, MxScaleRule rule) {
  const std::uint32_t magnitude = std::bit_cast<std::uint32_t>(block_amax) & 0x7FFF'FFFFu;
  if (magnitude > 0x7F80'0000u) return kE8m0Nan;
  if (magnitude == 0x7F80'0000u) return rule == MxScaleRule::ocp_floor ? kE8m0Nan : kE8m0MaxCode;
  if (magnitude == 0) return 0;
  const detail::AmaxBinade binade = detail::amax_binade(magnitude);
  int exponent = binade.exponent - mx_element_emax(format);
  if (rule == MxScaleRule::round_up && binade.above_element_max_significand) ++exponent;
  // exponent <= 127 - 8 + 1, so only the lower clamp can bite.
  return static_cast<std::uint8_t>(exponent < -127 ? 0 : exponent + 127);
}

}  // namespace fp8c::numerics
