// The epilogue kernel: what one computes, independent of how it is built
// (epilogue_ir.cpp: kernel IR, printed as CUDA for NVRTC or lowered through
// LLVM). Element-wise over a high-precision [rows, cols] input in the layer
// dtype; it is the plan's epilogue step (bias / activation /
// FP8 cast after a row layer's reduction, and dact / dbias where no quantize
// step fuses them), and it finishes a GEMM whose epilogue cannot apply the
// activation (the GEMM writes z with bias, this kernel makes y from it).
//
// Forward (backward = false), per element, in fp32:
//   z = x + bias[col]       (without bias: z = x)
//   y = act(z)              (runtime/cpu/activation.hpp's formulas)
//   stores z in the layer dtype (store_pre), y in `output`: bf16 / fp16 /
//   fp32, or FP8 as fp8(y * scale) with a per-tensor (delayed) scale read
//   from memory; amax = max |y| before the scaling (float bits, atomic max).
// Backward (backward = true):
//   v = dy * act'(z)        (without an activation: v = dy)
//   stores v in the layer dtype (or fp32: dz staged for a block quantizer);
//   dbias = column sums of v, as per-128-row tile partials that the dbias
//   reduce (DbiasReduceKernel, quantize.hpp) adds in tile order, so the
//   result does not depend on scheduling.
// Every store rounds to nearest even; FP8 saturates to the largest finite
// value (cvt.rn.satfinite); every NaN stored to fp32 (and amax) is the
// canonical 0x7FFFFFFF, to bf16 / fp16 0x7FFF (dbias sums are not
// canonicalised: a NaN partial keeps whatever NaN the additions made).
// Summation order of one tile's column (the CPU reference repeats it): four
// quarters of 32 rows, each summed from its first row to its last starting
// from +0, then quarter0 + quarter1 + quarter2 + quarter3. v is rounded to
// fp32 before it is summed (never fused into an FMA).
#pragma once

#include <string>

#include "codegen/ir/ir.hpp"
#include "codegen/kernels/kernel_source.hpp"
#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

struct EpilogueKernel {
  ElemType input = ElemType::bf16;  // layer dtype: x or dy, bias, z; bf16, fp16 or fp32
  bool backward = false;
  Activation activation = Activation::none;  // forward: act; backward: act'
  // forward
  bool bias = false;
  bool store_pre = false;            // store z, the pre-activation backward's dact reads
  ElemType output = ElemType::bf16;  // y; backward: v's type, `input` or fp32
  bool amax = false;                 // max |y|, before the FP8 scaling
  // backward
  bool dbias = false;

  bool fp8_output() const { return is_fp8(output); }
  std::string name() const;  // unique per variant; also the entry point's name
  bool operator==(const EpilogueKernel&) const = default;
};

// One block of kEpilogueThreads threads owns a tile of kEpilogueTileCols
// columns and 32 rows (forward) or kEpilogueDbiasTileRows rows (backward:
// one dbias partial row per tile). Grid: x = row tiles, y = column tiles.
inline constexpr int kEpilogueThreads = 256;
// At least two blocks per SM (at most 128 registers a thread): the backward
// form issues eight rows of x and z loads before it uses any, and left to
// itself LLVM's build of the dgelu dbias variant took 146 registers, one
// block of 8 warps per SM, 5% slower than NVRTC's 104.
inline constexpr int kEpilogueMinBlocks = 2;
inline constexpr int kEpilogueTileCols = 512;
inline constexpr int kEpilogueForwardTileRows = 32;
inline constexpr int kEpilogueDbiasTileRows = 128;

inline int epilogue_tile_rows(const EpilogueKernel& k) {
  return k.backward ? kEpilogueDbiasTileRows : kEpilogueForwardTileRows;
}

// Kernel arguments, in order (device pointers; those the variant does not
// use may be null):
//   const IN* x (forward input, backward dy), const IN* bias ([cols]),
//   const IN* pre (backward: z), const float* scale (FP8 output: the
//   multiplier), void* out (y, or backward v), IN* pre_out (z),
//   u32* amax (float bits, atomic max), float* dbias_partial
//   ([ceil(rows / 128)][cols]), int rows, int cols.
// Throw std::invalid_argument for a description that makes no sense
// (a backward form with forward options, an FP8 input, ...).
ir::Kernel build_ir(const EpilogueKernel& kernel);
KernelSource emit_cuda(const EpilogueKernel& kernel);  // build_ir's kernel, printed as CUDA

}  // namespace fp8c
