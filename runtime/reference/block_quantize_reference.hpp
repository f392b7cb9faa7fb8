// The CPU reference of a BlockQuantizeKernel, written from the conventions in
// codegen/kernels/block_quantize.hpp with codegen/numerics, one block at a
// time. GPU tests compare data and scales with it bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "codegen/kernels/block_quantize.hpp"

namespace fp8c::runtime {

struct BlockQuantizeResult {
  std::vector<std::uint8_t> rowwise, columnwise;                // FP8 data
  std::vector<std::uint8_t> rowwise_scales, columnwise_scales;  // raw bytes (fp32 or E8M0)
};

// Sizes in bytes of the scale tensors for a [rows, cols] input.
std::size_t block_scale_bytes(const BlockQuantizeKernel& kernel, std::int64_t rows,
                              std::int64_t cols, bool columnwise);

// `x` holds raw element bits of kernel.input, rows * cols elements.
BlockQuantizeResult reference_block_quantize(const BlockQuantizeKernel& kernel, const void* x,
                                             std::int64_t rows, std::int64_t cols);

}  // namespace fp8c::runtime
