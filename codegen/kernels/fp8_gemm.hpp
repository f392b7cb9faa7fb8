// The generated FP8 GEMM for Hopper (sm_90a): what one configuration
// computes, and its CUDA source for NVRTC. The device code is the real CUDA
// header codegen/kernels/device/fp8_gemm_sm90.cuh (embedded as a string at
// build time); a configuration only sets its constants and the wgmma
// instruction that its tile width and type pair need.
//
//   D[M][N] = A[M][K] . B[N][K]^T, A and B FP8 (e4m3 or e5m2, any pairing),
//   K innermost in both, D bf16, fp16, fp32, e4m3 or e5m2.
//
// The fused epilogue, per element, in this order (each part optional):
//   v = alpha * acc (+ D, accumulate) (+ bias[n]); aux = v; v = act(v);
//   amax = max |v|; D = v, or fp8(v * d_scale) saturating for an FP8 D.
// The backward's form instead: v = alpha * acc * act'(aux[m][n]) (dact: aux
// is read, the pre-activation saved in the forward); dbias adds each column
// of v over M (partials per 16 rows, fp8_gemm_params.h); and an FP8 D may be
// written transposed as well (D^T [N][M], the same bits).
// alpha is the two per-tensor scale_invs, or the block scales per 128 K.
//
// Scaling, per operand (a_scale_rows / b_scale_rows):
//   0    per tensor: one float scale_inv; with fast_accumulate the tensor
//        cores accumulate all of K, without, every 128 K is promoted to fp32
//   1    1x128 blocks: one float per row and 128 K
//   128  128x128 blocks: one float per 128 rows and 128 K
// or, with `mx` (both operands; scale rows 1), MXFP8: one E8M0 code byte
// per row and 32 K, each 32 K promoted; codes row-major [rows][pitch], or
// with both k_major flags K-block-major [ceil(K/32)][pitch] (copied 16 rows
// at a time and decoded by one warp; slower than row-major: docs/gemm.md).
// Either both operands are per-tensor or both block-scaled. A 1x128
// operand's scales may be marked K-block-major (a_scales_k_major /
// b_scales_k_major): a K block's scales of consecutive rows are consecutive
// floats, 16-byte aligned every 4 rows, so the kernel copies them 16 bytes at
// a time (the caller guarantees that layout: generated_gemm_choice).
//
// How a configuration is chosen for a shape lives apart, in
// fp8_gemm_heuristic.hpp.
#pragma once

#include <cstddef>
#include <string>

#include "codegen/kernels/kernel_source.hpp"
#include "fp8c/elem_type.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

struct Fp8GemmKernel {
  ElemType a = ElemType::e4m3;
  ElemType b = ElemType::e4m3;
  ElemType d = ElemType::bf16;
  int a_scale_rows = 0;
  int b_scale_rows = 0;
  bool a_scales_k_major = false;  // 1x128, or MXFP8 (both alike)
  bool b_scales_k_major = false;  // 1x128, or MXFP8 (both alike)
  bool fast_accumulate = false;   // per-tensor only
  // MXFP8 (1x32 E8M0 codes, both operands; a/b_scale_rows 1): each 32 K
  // lands in a fresh partial accumulator, added into the fp32 total times
  // the row's and the column's 2^(code - 127).
  bool mx = false;
  // 64: one math warpgroup; 128: two; 256: two, each computing two 64-row
  // waves of the tile in turn.
  int block_m = 128;
  int block_n = 128;  // 16..256, a multiple of 16
  int stages = 6;     // shared-memory ring depth
  // 1, or 2: clusters of two CTAs on vertically adjacent tiles sharing (and
  // multicasting) the B tile (fp8_gemm_sm90.cuh).
  int cluster_m = 1;
  // The epilogue. aux (the pre-activation) needs an activation; accumulate
  // reads D back, so D must be high precision.
  bool bias = false;
  ElemType bias_type = ElemType::bf16;  // bf16, fp16 or fp32
  Activation activation = Activation::none;
  bool aux = false;
  ElemType aux_type = ElemType::bf16;  // bf16, fp16 or fp32
  bool accumulate = false;
  bool amax = false;
  // dact != none: aux (aux_type) is read and v multiplied by act'(aux);
  // no activation, bias or accumulation beside it.
  Activation dact = Activation::none;
  bool dbias = false;       // D's column sums per 16 rows into dbias_partial
  bool transposed = false;  // FP8 D only: D^T too

  bool block_scaled() const { return a_scale_rows != 0; }
  bool promotes() const { return block_scaled() || !fast_accumulate; }
  int threads() const { return 128 * (math_warpgroups() + 1); }
  int math_warpgroups() const { return block_m == 64 ? 1 : 2; }
  // Dynamic shared memory: the ring, its barriers, and 1 KB to align the
  // ring to the swizzle's 1024-byte period.
  std::size_t shared_bytes() const;
  std::string name() const;
  bool operator==(const Fp8GemmKernel&) const = default;
};

// Bytes of shared memory one CTA may have on sm_90 (227 KB).
inline constexpr std::size_t kSm90SharedBytes = 232448;

// The deepest ring `kernel` fits in kSm90SharedBytes with, at most `most`
// stages and at least 2 (2 when none fits: fp8_gemm_problem() then says so).
int deepest_ring(Fp8GemmKernel kernel, int most = 8);

// Why `kernel` is not a configuration the device code can build (empty when
// it is): types, tile sizes, scale pairings, shared memory.
std::string fp8_gemm_problem(const Fp8GemmKernel& kernel);

// Throws std::invalid_argument with fp8_gemm_problem()'s text.
KernelSource emit_cuda(const Fp8GemmKernel& kernel);

}  // namespace fp8c
