// The CPU reference of an EpilogueKernel: runtime/cpu's epilogue semantics
// (executor.cpp's emit_output and epilogue, activation.hpp's formulas) one
// element at a time, stored as the kernel stores (element_store.hpp), with
// the kernel's dbias summation order (epilogue.hpp). It is the kernel bit
// for bit wherever the kernel is exact: bias add, relu / none, casts, FP8,
// amax, z, and dbias of exact values. GELU and SiLU use tanh.approx /
// ex2.approx / div.approx on the GPU (activation_ir.hpp), so there the GPU
// is within activation_bound.hpp's bounds of this reference instead.
#pragma once

#include <cstdint>
#include <vector>

#include "codegen/kernels/epilogue.hpp"

namespace fp8c::runtime {

struct EpilogueResult {
  std::vector<std::uint8_t> out;      // y (forward) or v (backward), kernel.output bits
  std::vector<std::uint8_t> pre_out;  // z, with store_pre
  std::uint32_t amax_bits = 0;        // max |y| as float bits, with amax
  std::vector<float> dbias_partial;   // [ceil(rows / 128)][cols], with dbias
  std::vector<float> dbias;           // [cols]: the partials added in tile order
};

// `x`, `bias` and `pre` hold raw element bits of kernel.input (x: rows * cols,
// bias: cols, pre: rows * cols for backward dact); `scale` is the FP8
// output's multiplier.
EpilogueResult reference_epilogue(const EpilogueKernel& kernel, const void* x, const void* bias,
                                  const void* pre, float scale, std::int64_t rows,
                                  std::int64_t cols);

// The fp32 value the kernel stores at element `index` before rounding: y
// (forward) or v (backward). With `z`, also the pre-activation (forward:
// x + bias; backward: the z read).
float reference_epilogue_value(const EpilogueKernel& kernel, const void* x, const void* bias,
                               const void* pre, std::int64_t index, std::int64_t cols,
                               float* z = nullptr);

}  // namespace fp8c::runtime
