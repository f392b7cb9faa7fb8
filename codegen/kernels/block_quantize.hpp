// Block-scaled FP8 quantization: what one kernel computes.
//
// Input: a high-precision [rows, cols] tensor (logical order). Output: the
// FP8 data in the usages asked for, each with its own scales, because a block
// format cannot derive one usage from the other:
//   rowwise     data [rows][cols],  blocks along cols
//   columnwise  data [cols][rows],  blocks along rows
// Block shapes (in the usage's physical order, outer x inner):
//   block_1x128    1 x 128, scale_inv as fp32: rowwise [rows][ceil(cols/128)],
//                  columnwise [cols][ceil(rows/128)]
//   block_128x128  128 x 128 (weights), fp32: rowwise [ceil(rows/128)][ceil(cols/128)],
//                  columnwise [ceil(cols/128)][ceil(rows/128)]
//   mx_1x32        1 x 32, E8M0 codes: rowwise [rows][ceil(cols/32)],
//                  columnwise [cols][ceil(rows/32)]
// A block at the edge of a dim that is not a multiple of its size is partial:
// its amax covers only the elements that exist. Per block:
//   blockwise: s = numerics::blockwise_scale(amax, format, pow2), stored as 1/s
//   mxfp8:     code = numerics::mx_block_scale(amax, format, round_up), s = 2^(127 - code)
//   element    = fp8(v * s), round to nearest even, saturating.
// This is runtime/cpu's convention, and the CPU reference's.
// The kernel is built as kernel IR (block_quantize_ir.cpp, whose opening
// comment says how it works), printed as CUDA C++ for NVRTC or lowered
// through LLVM.
#pragma once

#include <string>

#include "codegen/ir/ir.hpp"
#include "codegen/kernels/kernel_source.hpp"
#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

struct BlockQuantizeKernel {
  ElemType input = ElemType::bf16;
  ElemType format = ElemType::e4m3;        // e4m3 or e5m2
  Scaling scaling = Scaling::block_1x128;  // block_1x128, block_128x128 or mx_1x32
  bool rowwise = true;
  bool columnwise = false;
  bool pow2 = false;  // blockwise only: scales rounded down to powers of two
  // block_1x128 only: scales K-block-major, [ceil(inner/128)][outer] (rowwise
  // [ceil(cols/128)][rows], columnwise [ceil(rows/128)][cols]), the order
  // cuBLASLt's 1x128 mode reads (runtime/gemm/cublaslt_requirements.hpp),
  // instead of [outer][ceil(inner/128)]. Same bytes, transposed.
  bool k_block_major = false;
  // Quantizes dz = x * act'(pre) (bf16/fp16 x and pre of one type): the
  // gradient through the activation, computed in fp32 as the backward
  // epilogue kernel computes it (dy * act'(z), act' from activation_ir.hpp,
  // the product a multiply of its own), so the result is bit for bit that
  // of the epilogue's fp32 dz quantized by an fp32-input kernel, without
  // writing and reading dz.
  Activation dact = Activation::none;

  std::string name() const;
  bool operator==(const BlockQuantizeKernel&) const = default;
};

// One block of 256 threads per 128 x 128 tile; grid ceil(cols / 128) x ceil(rows / 128).
// No dynamic shared memory: the kernel's 17-21 KB are static, so 4 blocks
// fit on an SM (64 registers for bf16/fp16 input; 2 blocks for fp32 input
// and for dact, which keeps fp32 dz).
inline constexpr int kBlockQuantizeThreads = 256;
inline constexpr int kBlockQuantizeSharedBytes = 0;

// Arguments: const IN* x, u8* rowwise, void* rowwise_scales, u8* columnwise,
// void* columnwise_scales, int rows, int cols, and with dact a last
// const IN* pre ([rows, cols], the saved pre-activation). In the IR, IN is
// f32 or u16 (bf16/fp16 bits) and the scales are f32 or u8 (E8M0).
// build_ir throws std::invalid_argument for a description it cannot build.
ir::Kernel build_ir(const BlockQuantizeKernel& kernel);
KernelSource emit_cuda(const BlockQuantizeKernel& kernel);

}  // namespace fp8c
