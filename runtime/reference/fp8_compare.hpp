// How a generated kernel's FP8 output is compared with the CPU reference
// where the two may legitimately differ: the activation-gradient kernels use
// tanh.approx / __expf, so dact may differ by about 1e-3 absolute (dGELU's two
// terms cancel where the true value is near 0, so no relative bound holds
// there). A code passes when the decoded values differ by at most
// 2e-3 * |grad| * scale plus one step of the FP8 grid at that magnitude.
// Everything else is compared bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "codegen/numerics/fp8.hpp"
#include "fp8c/elem_type.hpp"
#include "runtime/reference/element.hpp"

namespace fp8c::runtime {

inline bool fp8_close_for_dact(std::uint8_t got, std::uint8_t want, float grad, float scale,
                               ElemType format) {
  if (got == want) return true;
  require_fp8(format, "fp8_close_for_dact");
  const float a = numerics::fp8_to_float(got, format), b = numerics::fp8_to_float(want, format);
  if (std::isnan(a) || std::isnan(b)) return false;
  const float larger = std::max(std::fabs(a), std::fabs(b));
  // The grid step at that magnitude: relative for normal values, the
  // subnormal spacing (2^-9 for E4M3, 2^-16 for E5M2) below them.
  const float relative_step = larger * (format == ElemType::e4m3 ? 0.125f : 0.25f);
  const float subnormal_step = format == ElemType::e4m3 ? 0x1p-9f : 0x1p-16f;
  const float step = std::max(relative_step, subnormal_step);
  return std::fabs(a - b) <= 2e-3f * std::fabs(grad) * scale + step;
}

}  // namespace fp8c::runtime
