// The generated FP8 GEMM's one kernel argument, shared word for word by the
// host (runtime/gemm/generated_gemm.cpp fills it) and the device code
// (fp8_gemm_sm90.cuh reads it; codegen/kernels/cuda_fp8_gemm.cpp pastes this
// file into the NVRTC source). Plain C++ that both compilers accept: no
// includes, no fixed-width typedefs. Passed as a __grid_constant__ parameter,
// so the TMA descriptors stay in parameter space where cp.async.bulk.tensor
// may read them.
#ifndef FP8C_FP8_GEMM_PARAMS_H
#define FP8C_FP8_GEMM_PARAMS_H

namespace fp8c_gemm {

// A CUtensorMap, opaque: 128 bytes, 64-byte aligned (cuda.h's definition,
// which NVRTC does not see).
struct alignas(64) TmaDescriptor {
  unsigned long long opaque[16];
};

// D[M][N] = A[M][K] . B[N][K]^T, both operands K-innermost FP8.
// Scales are float *inverse* scales (what multiplies the stored value):
//  - per tensor: a_scale / b_scale point at one float;
//  - blocks: the scale of row r (of A, or of B: a column of D) and K block kb
//    is scale[(r / scale_rows) * scale_row_stride + kb * scale_kblock_stride],
//    scale_rows being 1 (1x128 blocks) or 128 (128x128 blocks), a compile-time
//    choice of the kernel;
//  - MXFP8 (the kernel's kMx): bytes, E8M0 codes, one per row and 32 K.
//    Row-major: row r's from scale + r * scale_row_stride
//    (scale_kblock_stride, 4, is not read). K-block-major (kAScalesKMajor):
//    the codes of 32-K block j from scale + j * scale_kblock_stride, one
//    byte a row (scale_row_stride 1).
// The epilogue's operands (fp8_gemm_sm90.cuh), each read or written only
// when the kernel's configuration has that part: bias [N]; aux [M][ld_aux]
// (the pre-activation: written, or with kDact read); d_scale (one float,
// FP8 D); d_amax (one float's bits, raised with atomicMax: the caller zeroes
// it first); dbias_partial ([ceil(M / 16)][N] floats: row g holds the column
// sums of D's rows 16 g .. 16 g + 15, before any FP8 cast); d_t (FP8 D only:
// D transposed, [N][ld_dt] bytes, the same bits as D).
struct Fp8GemmParams {
  TmaDescriptor a;  // A [M][lda] bytes; box {128, block_m}, 128-byte swizzle
  TmaDescriptor b;  // B [N][ldb] bytes; box {128, block_n}, 128-byte swizzle
  unsigned long long d;
  unsigned long long a_scale;
  unsigned long long b_scale;
  long long ldd;  // elements
  long long a_scale_row_stride;
  long long a_scale_kblock_stride;
  long long b_scale_row_stride;
  long long b_scale_kblock_stride;
  unsigned long long bias;
  unsigned long long aux;
  unsigned long long d_scale;
  unsigned long long d_amax;
  long long ld_aux;  // elements
  unsigned long long dbias_partial;
  unsigned long long d_t;
  long long ld_dt;  // bytes
  int m;
  int n;
  int k;
  int tile_group;  // M tiles walked before the next N tile (L2 reuse)
};

}  // namespace fp8c_gemm

#endif  // FP8C_FP8_GEMM_PARAMS_H
