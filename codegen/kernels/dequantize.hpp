// The dequantize kernel: what one computes, independent of how it is built
// (dequantize_ir.cpp, as kernel IR for both backends). The plan's dequantize step: an FP8 GEMM
// operand as high precision, for a debug fallback GEMM.
//
// Input: FP8 data in its usage's physical order [outer][inner], or, for an
// all-gather output not yet permuted, rank segments along the inner dim:
// [segments][outer][inner / segments]. Its scaling (block layouts as in
// block_quantize.hpp, in the same physical order):
//   per_tensor     one float: the quantizer's multiplier s, which the plan
//                  keeps in the tensor named "*.scale_inv"; the kernel applies
//                  1 / s, one IEEE division (numerics::scale_inverse)
//   block_1x128    fp32 scale_inv [outer][ceil(inner / 128)]
//   block_128x128  fp32 scale_inv [ceil(outer / 128)][ceil(inner / 128)]
//   mx_1x32        E8M0 codes [outer][ceil(inner / 32)], 2^(code - 127) each
// Data gathered along its inner dim holds each rank's own blocks: segments x
// ceil(inner / segments / block) block columns (segmented: scale tensor
// [segments][rows][blocks per segment], else contiguous rows of them).
//
// Output: out = fp8_to_float(code) * scale_inv as one fp32 product, then
// rounded to nearest even to `output`; NaN canonical (codegen/numerics'
// rules, runtime/reference/element_store.hpp). This is runtime/cpu's decode() followed by its
// store, bit for bit. The output is in logical order, as the plan's
// rowwise high-precision tensor: [outer][inner] for rowwise data, and the
// transpose [inner][outer] for columnwise data (`transpose`).
// amax (debug statistics): max |out| before the rounding, float bits.
#pragma once

#include <string>

#include "codegen/ir/ir.hpp"
#include "codegen/kernels/kernel_source.hpp"
#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

struct DequantizeKernel {
  ElemType format = ElemType::e4m3;       // e4m3 or e5m2
  Scaling scaling = Scaling::per_tensor;  // per_tensor, block_1x128, block_128x128, mx_1x32
  ElemType output = ElemType::bf16;       // bf16, fp16 or fp32
  bool transpose = false;                 // columnwise data: write [inner][outer]
  bool amax = false;

  std::string name() const;
  bool operator==(const DequantizeKernel&) const = default;
};

// One block of 256 threads per tile of 64 (outer) x 128 (inner) elements;
// grid x = ceil(outer / 64), y = ceil(inner / 128).
inline constexpr int kDequantizeThreads = 256;
inline constexpr int kDequantizeTileOuter = 64;
inline constexpr int kDequantizeTileInner = 128;

// Arguments: const u8* data, const float* tensor_scale (per_tensor),
// const void* block_scales, OUT* out, u32* amax (float bits, atomic max),
// int outer, int inner, int segments, int segmented (0 or 1). build_ir
// (dequantize_ir.cpp) throws std::invalid_argument for a format that is not
// FP8, a scaling that is not one of the four above, or an output that is
// not bf16, fp16 or fp32; emit_cuda is its CUDA print.
ir::Kernel build_ir(const DequantizeKernel& kernel);
KernelSource emit_cuda(const DequantizeKernel& kernel);

}  // namespace fp8c
