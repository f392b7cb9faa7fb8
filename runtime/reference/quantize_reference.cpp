#include "runtime/reference/quantize_reference.hpp"

#include <bit>
#include <cmath>

#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "codegen/numerics/scale.hpp"

namespace fp8c::runtime {
namespace {

float load(ElemType type, const void* data, std::int64_t i) {
  switch (type) {
    case ElemType::bf16:
      return numerics::bf16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case ElemType::fp16:
      return numerics::fp16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

// The derivative of each activation, written exactly as the generated
// kernels write it (fp32 throughout).
float dact(Activation act, float x) {
  switch (act) {
    case Activation::none:
      return 1.0f;
    case Activation::relu:
      return x > 0.0f ? 1.0f : 0.0f;
    case Activation::gelu: {
      const float k0 = 0.7978845608028654f, k1 = 0.044715f;
      const float t = std::tanh(k0 * x * (1.0f + k1 * x * x));
      return 0.5f * x * ((1.0f - t * t) * (k0 + 3.0f * k0 * k1 * x * x)) + 0.5f * (1.0f + t);
    }
    case Activation::silu: {
      const float s = 1.0f / (1.0f + std::exp(-x));
      return s + x * s * (1.0f - s);
    }
  }
  return 1.0f;
}

numerics::Fp8Format format_of(Fp8Format f) {
  return f == Fp8Format::e4m3 ? numerics::Fp8Format::e4m3 : numerics::Fp8Format::e5m2;
}

}  // namespace

float reference_element(const QuantizeKernel& k, const void* x, const void* pre, std::int64_t i) {
  float v = load(k.input, x, i);
  if (k.dact != Activation::none) v *= dact(k.dact, load(k.input, pre, i));
  return v;
}

QuantizeResult reference_quantize(const QuantizeKernel& k, const void* x, const void* pre,
                                  float scale, float amax_in, std::int64_t rows,
                                  std::int64_t cols) {
  QuantizeResult out;
  const auto format = format_of(k.format);
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
