// The CPU reference of a QuantizeKernel: the same arithmetic, one element at
// a time, with codegen/numerics' bit-exact conversions. GPU tests compare the
// generated kernels against it; casts, transposes, scales and amax must match
// bit for bit, column sums (dbias) and activation gradients within a stated
// tolerance (different summation order; tanhf/expf differ in the last bits).
#pragma once

#include <cstdint>
#include <vector>

#include "codegen/kernels/quantize.hpp"

namespace fp8c::runtime {

struct QuantizeResult {
  std::vector<std::uint8_t> rowwise;     // [rows, cols], empty if not asked for
  std::vector<std::uint8_t> columnwise;  // [cols, rows], empty if not asked for
  std::uint32_t amax_bits = 0;           // max |v| as float bits
  std::vector<float> dbias;              // [cols]
  float scale = 1.0f;                    // the scale used
};

// `x` and `pre` hold raw element bits of kernel.input (uint16 for bf16/fp16,
// float for fp32), `rows * cols` elements each; `pre` only with dact.
// `scale` is used as is unless kernel.scale_from_amax, when it comes from
// `amax_in` (an already reduced amax) as the kernel computes it.
QuantizeResult reference_quantize(const QuantizeKernel& kernel, const void* x, const void* pre,
                                  float scale, float amax_in, std::int64_t rows, std::int64_t cols);

// The value the kernel quantizes at one element, x or x * act'(pre).
float reference_element(const QuantizeKernel& kernel, const void* x, const void* pre,
                        std::int64_t index);

}  // namespace fp8c::runtime
