// What fp8c's cuBLASLt runner can do, as a pure function of the arguments,
// the library version and the GPU: testable on a machine with neither.
// The runner (cublaslt_gemm.cpp) asks this first, then cuBLASLt's own
// heuristic, and supports() says no with the first reason either gives.
//
// How a GemmArgs maps onto cuBLASLt (column-major): row-major D[M][N] is
// column-major D (N x M, ld = ldd), so
//   D = op_T(cuBLAS A = fp8c b, K x N, ld = b.ld) * op_N(cuBLAS B = fp8c a, K x M, ld = a.ld)
// and the bias [N] runs along D's column-major rows, as EPILOGUE_BIAS adds it.
// Every per-operand attribute (scale pointer, scale mode) swaps with them.
//
// Rules, each with the reason supports() gives:
//  - Operands: both FP8 (e4m3/e5m2, not e5m2 x e5m2, sm_89+) or both the same
//    high-precision type (bf16, fp16, fp32); compute fp32, scale type fp32.
//  - D: FP8 operands -> bf16, fp16, fp32, e4m3, or e5m2 when an operand is
//    e5m2; bf16 -> bf16/fp32; fp16 -> fp16/fp32; fp32 -> fp32.
//    d_scale only with an FP8 D; d_amax only with an FP8 D (the one form
//    fp8c has checked cuBLASLt computes it in); accumulate only into fp32
//    (the contract) and without an activation.
//  - Bias: the D type for high-precision operands; for FP8 operands bf16 with
//    a bf16 or fp32 D, fp16 with fp16, and bf16 or fp16 with an FP8 D (where
//    cuBLASLt wants C's type equal to the bias type).
//  - Activation: gelu (GELU / GELU_BIAS, and GELU_AUX(_BIAS) with aux, which
//    then holds the pre-activation). relu: cuBLASLt's RELU_AUX stores a bit
//    mask, not the pre-activation; silu: no such epilogue. The executor runs
//    its own activation kernel for both.
//  - FP8 alignment (cuBLASLt's FP8 requirements): 16-byte aligned A, B, D,
//    bias and aux; lda, ldb and ldd*sizeof(D) multiples of 16 bytes; K a
//    multiple of 16.
//
// Block scaling (Hopper only, cuBLASLt >= 12.9): per operand
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (block_1x128) or
// BLK128x128_32F (block_128x128), not both 128x128; the scale values are
// dequantization multipliers, i.e. fp8c's scale_inv = 1/s. The layouts
// cuBLASLt reads, for an operand of R rows (M or N) with K innermost,
// nb = ceil(K/128) (from TransformerEngine's "GEMM-ready" tensors and
// PyTorch's _scaled_mm checks; cuBLASLt takes no leading dimension for a
// scale tensor, so any padding must be what it assumes):
//   VEC128_32F:     fp32 [nb][R'], R contiguous: scale(r, kb) at kb * R' + r,
//                   R' = R (PyTorch) or R rounded up to 4 (TE); the same when R % 4 == 0.
//   BLK128x128_32F: fp32 [ceil(R/128)][nb'], nb contiguous: scale(rb, kb) at rb * nb' + kb,
//                   nb' = nb rounded up to a multiple of 4 (measured on the H200,
//                   cuBLASLt 13: packed rows with nb % 4 != 0 give wrong results,
//                   padded ones pass; CublasLtGemmGpu.BlockScaled128x128ScaleRows...).
// fp8c's quantizer writes 1x128 scales row-major, [R][nb] (scale(r, kb) at
// r * nb + kb): the transpose of what VEC128_32F reads, the same only when
// nb == 1. Its 128x128 scales are [ceil(R/128)][nb]: what BLK128x128_32F
// reads when nb % 4 == 0 or there is a single row of blocks. So block_1x128
// needs scale_order = k_block_major (R % 4 == 0 or nb == 1), and
// block_128x128 with nb % 4 != 0 over more than 128 rows a copy with
// scale_stride = nb'; otherwise supports() says which. (The GPU executor
// makes both in staging: codegen/lower.)
// TransformerEngine uses only DEFAULT and BIAS epilogues here, so fp8c asks
// for nothing more: no GELU, no FP8 D, no amax, no fast accumulation.
//
// MXFP8 (mx_1x32, VEC32_UE8M0) runs in cuBLASLt only on Blackwell, and
// there it reads E8M0 scales in a swizzled 128x4-tile layout, not the plain
// [rows][ceil(K/32)] fp8c writes: refused on every GPU, with the reason.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "runtime/gemm/gemm.hpp"

namespace fp8c::runtime {

// The first cublasLtGetVersion() with VEC128_32F and BLK128x128_32F.
inline constexpr std::size_t kCublasLtBlockScalingVersion = 120900;

// Why cuBLASLt (version as cublasLtGetVersion() reports it) cannot run
// `args` on a GPU of compute capability `sm` (90 for H100/H200), or nullopt
// when nothing fp8c knows of stands in the way.
std::optional<std::string> cublaslt_form_problem(const GemmArgs& args, std::size_t cublaslt_version,
                                                 int sm);

}  // namespace fp8c::runtime
