#include "runtime/reference/dequantize_reference.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "codegen/numerics/e8m0.hpp"
#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/scale.hpp"
#include "runtime/reference/element.hpp"
#include "runtime/reference/element_store.hpp"

namespace fp8c::runtime {
namespace {

struct Blocks {
  std::int64_t outer, inner;
};

Blocks blocks_of(Scaling s) {
  if (s == Scaling::mx_1x32) return {1, 32};
  if (s == Scaling::block_128x128) return {128, 128};
  return {1, 128};
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

std::int64_t dequantize_scale_count(const DequantizeKernel& k, const DequantizeLayout& L) {
  if (k.scaling == Scaling::per_tensor) return 0;
  const Blocks b = blocks_of(k.scaling);
  return ceil_div(L.outer, b.outer) * L.segments * ceil_div(L.inner / L.segments, b.inner);
}

DequantizeResult reference_dequantize(const DequantizeKernel& k, const std::uint8_t* data,
                                      const void* block_scales, float tensor_scale,
                                      const DequantizeLayout& L) {
  const ElemType fmt = require_fp8(k.format, "reference_dequantize");
  const Blocks b = blocks_of(k.scaling);
  const std::int64_t seg_len = L.inner / L.segments;
  const std::int64_t seg_blocks = ceil_div(seg_len, b.inner);
  const std::int64_t scale_rows = ceil_div(L.outer, b.outer);
  const float tensor_inverse = numerics::scale_inverse(tensor_scale);
  DequantizeResult r;
  r.out.assign(static_cast<std::size_t>(L.outer * L.inner) * element_bytes(k.output), 0);
  for (std::int64_t o = 0; o < L.outer; ++o) {
    for (std::int64_t n = 0; n < L.inner; ++n) {
      const std::int64_t seg = n / seg_len, m = n % seg_len;
      const std::int64_t at = L.segmented ? (seg * L.outer + o) * seg_len + m : o * L.inner + n;
      float scale_inv = tensor_inverse;
      if (k.scaling != Scaling::per_tensor) {
        // The block (o / outer, m / inner) of this rank's segment.
        const std::int64_t bo = o / b.outer, bn = m / b.inner;
        const std::int64_t s = L.segmented ? (seg * scale_rows + bo) * seg_blocks + bn
                                           : bo * L.segments * seg_blocks + seg * seg_blocks + bn;
        if (k.scaling == Scaling::mx_1x32) {
          scale_inv = numerics::e8m0_to_float(static_cast<const std::uint8_t*>(block_scales)[s]);
        } else {
          std::memcpy(&scale_inv, static_cast<const std::uint8_t*>(block_scales) + 4 * s, 4);
        }
      }
      const float v = canonical_nan(numerics::fp8_to_float(data[at], fmt) * scale_inv);
      r.amax_bits = std::max(r.amax_bits, std::bit_cast<std::uint32_t>(v) & 0x7FFFFFFFu);
      store_element(k.output, r.out.data(), k.transpose ? n * L.outer + o : o * L.inner + n, v);
    }
  }
  return r;
}

}  // namespace fp8c::runtime
