#include "runtime/reference/block_quantize_reference.hpp"

#include <cstring>

#include "codegen/numerics/amax.hpp"
#include "codegen/numerics/e8m0.hpp"
#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "codegen/numerics/mx_scale.hpp"
#include "codegen/numerics/scale.hpp"
#include "runtime/reference/element.hpp"

namespace fp8c::runtime {
namespace {

struct Blocks {
  std::int64_t outer, inner;  // block extent in the usage's physical order
};

Blocks blocks_of(Scaling s) {
  if (s == Scaling::mx_1x32) return {1, 32};
  if (s == Scaling::block_128x128) return {128, 128};
  return {1, 128};
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// One usage: physical [outer][inner] where element (o, n) is logical
// (o, n) rowwise or (n, o) columnwise.
void quantize_usage(const BlockQuantizeKernel& k, const void* x, std::int64_t rows,
                    std::int64_t cols, bool columnwise, std::vector<std::uint8_t>& data,
                    std::vector<std::uint8_t>& scales) {
  const std::int64_t outer = columnwise ? cols : rows, inner = columnwise ? rows : cols;
  const auto at = [&](std::int64_t o, std::int64_t n) {
    return columnwise ? load_element(k.input, x, n * cols + o)
                      : load_element(k.input, x, o * cols + n);
  };
  const ElemType fmt = require_fp8(k.format, "reference_block_quantize");
  const Blocks b = blocks_of(k.scaling);
  const std::int64_t outer_blocks = ceil_div(outer, b.outer),
                     inner_blocks = ceil_div(inner, b.inner);
  data.assign(static_cast<std::size_t>(outer * inner), 0);
  scales.assign(block_scale_bytes(k, rows, cols, columnwise), 0);
  for (std::int64_t bo = 0; bo < outer_blocks; ++bo) {
    for (std::int64_t bn = 0; bn < inner_blocks; ++bn) {
      const std::int64_t o1 = std::min(outer, (bo + 1) * b.outer),
                         n1 = std::min(inner, (bn + 1) * b.inner);
      float amax = 0.0f;
      for (std::int64_t o = bo * b.outer; o < o1; ++o)
        for (std::int64_t n = bn * b.inner; n < n1; ++n)
          amax = numerics::amax_combine(amax, numerics::magnitude(at(o, n)));
      float multiplier;
      // block_1x128 K-block-major: [inner block][outer] (b.outer == 1, so bo is the row).
      const std::size_t index = static_cast<std::size_t>(k.k_block_major ? bn * outer_blocks + bo
                                                                         : bo * inner_blocks + bn);
      if (k.scaling == Scaling::mx_1x32) {
        const std::uint8_t code =
            numerics::mx_block_scale(amax, fmt, numerics::MxScaleRule::round_up);
        scales[index] = code;
        multiplier = numerics::e8m0_reciprocal(code);
      } else {
        multiplier = numerics::blockwise_scale(amax, fmt, k.pow2);
        const float inverse = numerics::scale_inverse(multiplier);
        std::memcpy(&scales[4 * index], &inverse, 4);
      }
      for (std::int64_t o = bo * b.outer; o < o1; ++o)
        for (std::int64_t n = bn * b.inner; n < n1; ++n)
          data[static_cast<std::size_t>(o * inner + n)] =
              numerics::float_to_fp8(at(o, n) * multiplier, fmt, numerics::Saturation::satfinite);
    }
  }
}

}  // namespace

std::size_t block_scale_bytes(const BlockQuantizeKernel& k, std::int64_t rows, std::int64_t cols,
                              bool columnwise) {
  const std::int64_t outer = columnwise ? cols : rows, inner = columnwise ? rows : cols;
  const Blocks b = blocks_of(k.scaling);
  const std::int64_t count = ceil_div(outer, b.outer) * ceil_div(inner, b.inner);
  return static_cast<std::size_t>(count * (k.scaling == Scaling::mx_1x32 ? 1 : 4));
}

BlockQuantizeResult reference_block_quantize(const BlockQuantizeKernel& k, const void* x,
                                             std::int64_t rows, std::int64_t cols) {
  BlockQuantizeResult r;
  if (k.rowwise) quantize_usage(k, x, rows, cols, false, r.rowwise, r.rowwise_scales);
  if (k.columnwise) quantize_usage(k, x, rows, cols, true, r.columnwise, r.columnwise_scales);
  return r;
}

}  // namespace fp8c::runtime
