#include "runtime/reference/epilogue_reference.hpp"

#include <algorithm>
#include <bit>

#include "codegen/numerics/fp8.hpp"
#include "runtime/cpu/activation.hpp"
#include "runtime/reference/element.hpp"
#include "runtime/reference/element_store.hpp"

namespace fp8c::runtime {

float reference_epilogue_value(const EpilogueKernel& k, const void* x, const void* bias,
                               const void* pre, std::int64_t i, std::int64_t cols, float* z) {
  const float a = load_element(k.input, x, i);
  if (k.backward) {
    if (k.activation == Activation::none) {
      if (z) *z = 0.0f;
      return a;
    }
    const float p = load_element(k.input, pre, i);
    if (z) *z = p;
    return a * cpu::activation_grad(k.activation, p);
  }
  const float pre_activation = k.bias ? a + load_element(k.input, bias, i % cols) : a;
  if (z) *z = pre_activation;
  return canonical_nan(cpu::activate(k.activation, pre_activation));
}

EpilogueResult reference_epilogue(const EpilogueKernel& k, const void* x, const void* bias,
                                  const void* pre, float scale, std::int64_t rows,
                                  std::int64_t cols) {
  EpilogueResult r;
  const auto n = static_cast<std::size_t>(rows * cols);
  const bool fp8 = k.fp8_output();
  // Backward: v in the input type, or fp32 (dz staged for the block quantizer).
  const ElemType out_type = k.output;
  r.out.assign(n * (fp8 ? 1 : element_bytes(out_type)), 0);
  if (k.store_pre) r.pre_out.assign(n * element_bytes(k.input), 0);
  const std::int64_t tiles = (rows + kEpilogueDbiasTileRows - 1) / kEpilogueDbiasTileRows;
  // quarter[q][c]: the running sum of quarter q of the current tile.
  std::vector<float> quarter;
  if (k.dbias) {
    r.dbias_partial.assign(static_cast<std::size_t>(tiles * cols), 0.0f);
    r.dbias.assign(static_cast<std::size_t>(cols), 0.0f);
    quarter.assign(static_cast<std::size_t>(4 * cols), 0.0f);
  }
  const std::int64_t quarter_rows = kEpilogueDbiasTileRows / 4;
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::int64_t q = (row % kEpilogueDbiasTileRows) / quarter_rows;
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t i = row * cols + c;
      float z = 0.0f;
      const float v = reference_epilogue_value(k, x, bias, pre, i, cols, &z);
      if (k.dbias) quarter[static_cast<std::size_t>(q * cols + c)] += v;
      if (k.store_pre) store_element(k.input, r.pre_out.data(), i, z);
      if (k.amax)
        r.amax_bits = std::max(r.amax_bits, std::bit_cast<std::uint32_t>(v) & 0x7FFFFFFFu);
      if (fp8)
        r.out[static_cast<std::size_t>(i)] =
            numerics::float_to_fp8(v * scale, k.output, numerics::Saturation::satfinite);
      else
        store_element(out_type, r.out.data(), i, v);
    }
    // The tile's last row: its partial is the four quarters in order.
    if (k.dbias &&
        (row % kEpilogueDbiasTileRows == kEpilogueDbiasTileRows - 1 || row == rows - 1)) {
      const std::int64_t tile = row / kEpilogueDbiasTileRows;
      for (std::int64_t c = 0; c < cols; ++c) {
        float total = quarter[static_cast<std::size_t>(c)];
        for (std::int64_t qq = 1; qq < 4; ++qq)
          total += quarter[static_cast<std::size_t>(qq * cols + c)];
        r.dbias_partial[static_cast<std::size_t>(tile * cols + c)] = total;
      }
      std::fill(quarter.begin(), quarter.end(), 0.0f);
    }
  }
  // dbias_reduce: from +0, tile by tile.
  for (std::int64_t tile = 0; k.dbias && tile < tiles; ++tile)
    for (std::int64_t c = 0; c < cols; ++c)
      r.dbias[static_cast<std::size_t>(c)] +=
          r.dbias_partial[static_cast<std::size_t>(tile * cols + c)];
  return r;
}

}  // namespace fp8c::runtime
