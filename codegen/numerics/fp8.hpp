#pragma once
// FP8 (OCP OFP8 E4M3 and E5M2) encode and decode, bit-exact with Hopper's
// cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 and with CUDA's host code in
// cuda_fp8.hpp (__nv_cvt_float_to_fp8, __nv_cvt_double_to_fp8,
// __nv_cvt_fp8_to_halfraw). tests/numerics checks every float bit pattern
// against CUDA's own functions.
//
//          bias  max finite     Inf          NaN codes
//   E4M3   7     448   (0x7E)   none         S.1111.111 (0x7F, 0xFF)
//   E5M2   15    57344 (0x7B)   S.11111.00   S.11111.{01,10,11}
//
// Everything here is constexpr and header-only so a caller's loop inlines and
// vectorises it, and so the same code can be compiled for the device.
//
// `format` is an FP8 format, ElemType::e4m3 or ElemType::e5m2; any other
// value is read as e5m2. These run per element and do not check: callers
// check once per tensor (require_fp8, fp8c/elem_type.hpp).

#include <bit>
#include <cstdint>

#include "codegen/numerics/half.hpp"
#include "codegen/numerics/round_to_grid.hpp"
#include "fp8c/elem_type.hpp"

namespace fp8c::numerics {

// What happens to a value whose magnitude, after rounding, exceeds the largest
// finite FP8 value. NaN input always gives NaN.
enum class Saturation : std::uint8_t {
  // To +-max, and +-Inf to +-max too: cvt.rn.satfinite / __NV_SATFINITE.
  // This is the only mode the hardware has for f32 -> FP8 (ptxas rejects
  // cvt.rn.e4m3x2.f32 without .satfinite), so every generated kernel uses it.
  satfinite,
  // E4M3 (no Inf): to NaN, keeping the sign (0xFF for negative overflow).
  // E5M2: to +-Inf. This is CUDA's software-only __NV_NOSAT.
  nosat,
};

inline constexpr std::uint8_t kE4m3Nan = 0x7F;
inline constexpr std::uint8_t kE4m3MaxCode = 0x7E;
inline constexpr std::uint8_t kE5m2MaxCode = 0x7B;
inline constexpr std::uint8_t kE5m2Inf = 0x7C;

constexpr float fp8_max(ElemType format) {
  return format == ElemType::e4m3 ? 448.0f : 57344.0f;
}
constexpr std::uint8_t fp8_max_code(ElemType format) {
  return format == ElemType::e4m3 ? kE4m3MaxCode : kE5m2MaxCode;
}

namespace detail {

// Unbounded magnitude code (see round_to_grid) for either format.
template <typename Bits>
constexpr std::uint32_t fp8_magnitude_code(Bits magnitude, ElemType format) {
  return format == ElemType::e4m3 ? round_to_grid<3, 7>(magnitude)
                                  : round_to_grid<2, 15>(magnitude);
}

constexpr std::uint8_t fp8_overflow_code(ElemType format, Saturation saturation) {
  if (saturation == Saturation::satfinite) return fp8_max_code(format);
  return format == ElemType::e4m3 ? kE4m3Nan : kE5m2Inf;
}

template <typename Bits>
constexpr std::uint8_t finite_or_inf_to_fp8(Bits magnitude, std::uint8_t sign, ElemType format,
                                            Saturation saturation) {
  const std::uint32_t code = fp8_magnitude_code(magnitude, format);
  const std::uint8_t bounded = code > fp8_max_code(format) ? fp8_overflow_code(format, saturation)
                                                           : static_cast<std::uint8_t>(code);
  return static_cast<std::uint8_t>(sign | bounded);
}

}  // namespace detail

// Round-to-nearest-even float -> FP8. Signed zeros and subnormals are kept
// (no flush to zero). Every float NaN, whatever its sign or payload, becomes
// +NaN 0x7F in both formats: CUDA canonicalises the NaN before converting and
// the hardware returns 0x7F too.
constexpr std::uint8_t float_to_fp8(float x, ElemType format, Saturation saturation) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t magnitude = bits & 0x7FFF'FFFFu;
  if (magnitude > 0x7F80'0000u) return kE4m3Nan;  // 0x7F is NaN in E5M2 as well
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  return detail::finite_or_inf_to_fp8(magnitude, sign, format, saturation);
}

// Round-to-nearest-even double -> FP8, rounding once (going through float
// first would round twice and differ near midpoints). NaN keeps its sign, and
// E5M2 also keeps the second-highest payload bit: -qNaN -> 0xFF (E4M3) or
// 0xFE (E5M2). That odd rule is __nv_cvt_double_to_fp8's, copied for
// bit-exactness; no hardware instruction converts f64 to FP8.
constexpr std::uint8_t double_to_fp8(double x, ElemType format, Saturation saturation) {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const std::uint64_t magnitude = bits & 0x7FFF'FFFF'FFFF'FFFFull;
  const auto sign = static_cast<std::uint8_t>((bits >> 56) & 0x80u);
  if (magnitude > 0x7FF0'0000'0000'0000ull) {
    if (format == ElemType::e4m3) return static_cast<std::uint8_t>(sign | kE4m3Nan);
    return static_cast<std::uint8_t>(sign | 0x7Eu | ((bits >> 50) & 1u));
  }
  return detail::finite_or_inf_to_fp8(magnitude, sign, format, saturation);
}

constexpr bool fp8_is_nan(std::uint8_t code, ElemType format) {
  const unsigned magnitude = code & 0x7Fu;
  return format == ElemType::e4m3 ? magnitude == 0x7Fu : magnitude > kE5m2Inf;
}

// Exact FP8 -> float. NaN becomes the canonical +NaN 0x7FFFFFFF (sign dropped),
// as __half2float(__nv_cvt_fp8_to_halfraw(code)) does on the host.
constexpr float fp8_to_float(std::uint8_t code, ElemType format) {
  if (fp8_is_nan(code, format)) return std::bit_cast<float>(0x7FFF'FFFFu);
  const int mantissa_bits = format == ElemType::e4m3 ? 3 : 2;
  const int bias = format == ElemType::e4m3 ? 7 : 15;
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const unsigned magnitude = code & 0x7Fu;
  if (format == ElemType::e5m2 && magnitude == kE5m2Inf) {
    return std::bit_cast<float>(sign | 0x7F80'0000u);
  }
  int exponent = static_cast<int>(magnitude >> mantissa_bits);
  unsigned fraction = magnitude & ((1u << mantissa_bits) - 1);
  if (magnitude == 0) return std::bit_cast<float>(sign);
  if (exponent == 0) {  // subnormal: normalise, every FP8 subnormal is a float normal
    exponent = 1;
    while ((fraction & (1u << mantissa_bits)) == 0) {
      fraction <<= 1;
      --exponent;
    }
    fraction &= (1u << mantissa_bits) - 1;
  }
  const auto float_exponent = static_cast<std::uint32_t>(exponent - bias + 127);
  return std::bit_cast<float>(sign | (float_exponent << 23) | (fraction << (23 - mantissa_bits)));
}

// Exact FP8 -> fp16 bits, what cvt.rn.f16x2.{e4m3x2,e5m2x2} and
// __nv_cvt_fp8_to_halfraw produce: every FP8 value is an fp16 value (E5M2 is
// literally fp16's top byte). NaN becomes +NaN 0x7FFF.
constexpr std::uint16_t fp8_to_half_bits(std::uint8_t code, ElemType format) {
  if (fp8_is_nan(code, format)) return kFp16CanonicalNan;
  if (format == ElemType::e5m2) return static_cast<std::uint16_t>(code << 8);
  return float_to_fp16(fp8_to_float(code, format));
}

}  // namespace fp8c::numerics
