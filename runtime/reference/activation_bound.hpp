// How far the generated kernels' GELU / SiLU (and their derivatives) may be
// from runtime/cpu/activation.hpp's formulas, derived from the documented
// error of the fast instructions they use (codegen/kernels/cuda_activation.hpp):
//   tanh.approx.f32   relative error below 2^-10.9 (PTX ISA)
//   __expf(x)         2 + floor(1.173 |x|) ulps, 1 ulp <= 2^-23 relative
//                     (CUDA C++ Programming Guide, intrinsic functions)
//   __fdividef(x, y)  2 ulps for 2^-126 <= |y| <= 2^126; 0 when |y| > 2^126
// Each bound is that error carried through the formula to first order (the
// derivative of the formula with respect to the approximated quantity),
// plus 2^-20 of the terms' magnitudes for the fp32 roundings, which differ
// between the two (FMA contraction, the CPU's own tanhf / expf). ReLU and
// none are exact (bound 0). The bounds are absolute, in the value's units.
#pragma once

#include <cmath>

#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"

namespace fp8c::runtime {

inline constexpr double kTanhApproxError = 5.243e-4;  // 2^-10.9, rounded up

inline double expf_relative_error(double x) {
  return (2.0 + std::floor(1.173 * std::fabs(x))) * 0x1p-23;
}

// |act_gpu(z) - act(z)|.
inline double activation_error_bound(Activation act, float zf) {
  const double z = zf;
  if (act == Activation::gelu) {
    // y = z (1 + t) / 2: dy/dt = z / 2.
    const double t = std::tanh(0.7978845608028654 * z * (1.0 + 0.044715 * z * z));
    return 0.5 * std::fabs(z) * std::fabs(t) * (kTanhApproxError + 0x1p-20) +
           0x1p-18 * std::fabs(z);
  }
  if (act == Activation::silu) {
    // y = z / (1 + e): relative error of e (damped by e / (1 + e) <= 1), the
    // add and the division; below 2^-126 __fdividef may return 0.
    const double y = z / (1.0 + std::exp(-z));
    return std::fabs(y) * (expf_relative_error(z) + 0x1p-20) + std::fabs(z) * 0x1p-125;
  }
  return 0.0;
}

// |act'_gpu(z) - act'(z)|.
inline double activation_grad_error_bound(Activation act, float zf) {
  const double z = zf;
  if (act == Activation::gelu) {
    // d = z (1 - t^2) P / 2 + (1 + t) / 2, P = k0 + 3 k0 k1 z^2:
    // dd/dt = 1/2 - z t P.
    const double k0 = 0.7978845608028654, k1 = 0.044715;
    const double t = std::tanh(k0 * z * (1.0 + k1 * z * z));
    const double p = k0 + 3.0 * k0 * k1 * z * z;
    return std::fabs(0.5 - z * t * p) * std::fabs(t) * (kTanhApproxError + 0x1p-20) +
           0x1p-20 * (0.5 * std::fabs(z) * p + 1.0);
  }
  if (act == Activation::silu) {
    // d = s + z s (1 - s), s = 1 / (1 + e): dd/ds = 1 + z (1 - 2 s).
    const double s = 1.0 / (1.0 + std::exp(-z));
    const double relative_s = expf_relative_error(z) + 0x1p-21;
    return std::fabs(1.0 + z * (1.0 - 2.0 * s)) * s * relative_s +
           0x1p-20 * (s + std::fabs(z) * s * (1.0 - s)) + (1.0 + std::fabs(z)) * 0x1p-125;
  }
  return 0.0;
}

// |v_gpu - v| for a backward epilogue's v = dy * act'(z) before it is
// stored: act''s bound scaled by |dy|, plus v's own rounding, within
// 2^-22 |v| while v is normal and within an absolute 2^-149 (two half steps
// of the subnormal grid) once it underflows, where a relative bound no
// longer holds.
inline double backward_value_error_bound(Activation act, double dy, float z, double v) {
  return std::fabs(dy) * activation_grad_error_bound(act, z) + 0x1p-22 * std::fabs(v) + 0x1p-149;
}

// Whether two stored values (decoded to double) can both be roundings to
// `type` of values at most `bound` apart: |got - want| <= bound + one grid
// step of `type` at the larger magnitude. NaN matches only NaN; an infinity
// counts as the next power of two past the largest finite value, so a
// rounding that overflows on one side only still compares by distance.
inline bool close_after_rounding(double got, double want, double bound, ElemType type) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (got == want) return true;
  int mantissa = 23;
  double smallest = 0x1p-149, beyond = 0x1p128;
  switch (type) {
    case ElemType::bf16:
      mantissa = 7, smallest = 0x1p-133;
      break;
    case ElemType::fp16:
      mantissa = 10, smallest = 0x1p-24, beyond = 0x1p16;
      break;
    case ElemType::e4m3:
      mantissa = 3, smallest = 0x1p-9;
      break;
    case ElemType::e5m2:
      mantissa = 2, smallest = 0x1p-16;
      break;
    default:
      break;
  }
  const auto finite = [&](double v) { return std::isinf(v) ? std::copysign(beyond, v) : v; };
  got = finite(got);
  want = finite(want);
  const double larger = std::fmax(std::fabs(got), std::fabs(want));
  const double step = std::fmax(std::ldexp(larger, -mantissa), smallest);
  return std::fabs(got - want) <= bound + step;
}

}  // namespace fp8c::runtime
