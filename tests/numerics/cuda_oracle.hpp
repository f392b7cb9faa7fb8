#pragma once
// CUDA's own host-side conversions, the independent oracle for fp8c_numerics.
// Only tests include this; the library itself never sees a CUDA header.
// With g++ (no __CUDA_ARCH__), cuda_fp8.hpp, cuda_bf16.hpp and cuda_fp16.hpp
// compile their portable host paths, which NVIDIA keeps equal to the device
// instructions.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <bit>
#include <cstdint>

#include "codegen/numerics/e8m0.hpp"
#include "codegen/numerics/fp8.hpp"

namespace fp8c::numerics::testing {

constexpr __nv_fp8_interpretation_t cuda_format(ElemType format) {
  return format == ElemType::e4m3 ? __NV_E4M3 : __NV_E5M2;
}
constexpr __nv_saturation_t cuda_saturation(Saturation saturation) {
  return saturation == Saturation::satfinite ? __NV_SATFINITE : __NV_NOSAT;
}
constexpr cudaRoundMode cuda_rounding(E8m0Rounding rounding) {
  return rounding == E8m0Rounding::up ? cudaRoundPosInf : cudaRoundZero;
}

inline std::uint8_t cuda_float_to_fp8(float x, ElemType format, Saturation saturation) {
  return __nv_cvt_float_to_fp8(x, cuda_saturation(saturation), cuda_format(format));
}
inline std::uint8_t cuda_double_to_fp8(double x, ElemType format, Saturation saturation) {
  return __nv_cvt_double_to_fp8(x, cuda_saturation(saturation), cuda_format(format));
}
inline std::uint16_t cuda_fp8_to_half_bits(std::uint8_t code, ElemType format) {
  return __nv_cvt_fp8_to_halfraw(code, cuda_format(format)).x;
}
inline std::uint32_t cuda_fp8_to_float_bits(std::uint8_t code, ElemType format) {
  const __half half(__nv_cvt_fp8_to_halfraw(code, cuda_format(format)));
  return std::bit_cast<std::uint32_t>(__half2float(half));
}

inline std::uint16_t cuda_float_to_bf16(float x) {
  return __nv_bfloat16_raw(__float2bfloat16(x)).x;
}
inline std::uint32_t cuda_bf16_to_float_bits(std::uint16_t bits) {
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return std::bit_cast<std::uint32_t>(__bfloat162float(__nv_bfloat16(raw)));
}
inline std::uint16_t cuda_float_to_fp16(float x) {
  return __half_raw(__float2half(x)).x;
}
inline std::uint32_t cuda_fp16_to_float_bits(std::uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return std::bit_cast<std::uint32_t>(__half2float(__half(raw)));
}

inline std::uint8_t cuda_float_to_e8m0(float x, E8m0Rounding rounding, Saturation saturation) {
  return __nv_cvt_float_to_e8m0(x, cuda_saturation(saturation), cuda_rounding(rounding));
}
inline std::uint8_t cuda_double_to_e8m0(double x, E8m0Rounding rounding, Saturation saturation) {
  return __nv_cvt_double_to_e8m0(x, cuda_saturation(saturation), cuda_rounding(rounding));
}
inline std::uint16_t cuda_e8m0_to_bf16_bits(std::uint8_t code) {
  return __nv_cvt_e8m0_to_bf16raw(code).x;
}

}  // namespace fp8c::numerics::testing
