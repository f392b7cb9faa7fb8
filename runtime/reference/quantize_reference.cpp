#include "runtime/reference/quantize_reference.hpp"

#include <bit>
#include <cmath>

#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "codegen/numerics/scale.hpp"
#include "runtime/cpu/activation.hpp"
#include "runtime/reference/element.hpp"

namespace fp8c::runtime {
float reference_element(const QuantizeKernel& k, const void* x, const void* pre, std::int64_t i) {
  float v = load_element(k.input, x, i);
  if (k.dact != Activation::none) v *= cpu::activation_grad(k.dact, load_element(k.input, pre, i));
  return v;
}

QuantizeResult reference_quantize(const QuantizeKernel& k, const void* x, const void* pre,
                                  float scale, float amax_in, std::int64_t rows,
                                  std::int64_t cols) {
  QuantizeResult out;
  const ElemType format = require_fp8(k.format, "reference_quantize");
  out.scale = k.scale_from_amax
                  ? numerics::scale_from_amax(amax_in, format, 1.0f, {0, k.pow2_scale, 0.0f})
                  : scale;
  const auto n = static_cast<std::size_t>(rows * cols);
  if (k.rowwise) out.rowwise.resize(n);
  if (k.columnwise) out.columnwise.resize(n);
  if (k.dbias) out.dbias.assign(static_cast<std::size_t>(cols), 0.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const float v = reference_element(k, x, pre, r * cols + c);
      out.amax_bits = std::max(out.amax_bits, std::bit_cast<std::uint32_t>(v) & 0x7FFFFFFFu);
      if (k.dbias) out.dbias[static_cast<std::size_t>(c)] += v;
      const std::uint8_t q =
          numerics::float_to_fp8(v * out.scale, format, numerics::Saturation::satfinite);
      if (k.rowwise) out.rowwise[static_cast<std::size_t>(r * cols + c)] = q;
      if (k.columnwise) out.columnwise[static_cast<std::size_t>(c * rows + r)] = q;
    }
  }
  return out;
}

}  // namespace fp8c::runtime
