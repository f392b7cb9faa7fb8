// The CPU reference of a DequantizeKernel: runtime/cpu's decode() (FP8 value
// times the block's scale_inv, or times numerics::scale_inverse of the
// per-tensor scale, one fp32 product) and its store, written out for the
// explicit layout the kernel takes. The kernel matches it bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "codegen/kernels/dequantize.hpp"

namespace fp8c::runtime {

// The FP8 data's layout, as DequantizeArgs gives it to the kernel.
struct DequantizeLayout {
  std::int64_t outer = 0;  // physical extents, all segments together
  std::int64_t inner = 0;
  int segments = 1;        // rank segments along inner (blocks restart in each)
  bool segmented = false;  // stored [segments][outer][inner / segments]
};

struct DequantizeResult {
  std::vector<std::uint8_t> out;  // raw kernel.output bits, logical order
  std::uint32_t amax_bits = 0;    // max |value| as float bits
};

// Elements of the block scale tensor (fp32 values or E8M0 codes); 0 for
// per-tensor scaling.
std::int64_t dequantize_scale_count(const DequantizeKernel& kernel, const DequantizeLayout& layout);

// `data`: outer * inner FP8 codes; `block_scales`: the scale tensor's raw
// bytes (block scalings); `tensor_scale`: the per-tensor multiplier s.
DequantizeResult reference_dequantize(const DequantizeKernel& kernel, const std::uint8_t* data,
                                      const void* block_scales, float tensor_scale,
                                      const DequantizeLayout& layout);

}  // namespace fp8c::runtime
