// Per-tensor FP8 quantization kernels: what one computes. quantize_ir.cpp
// builds each as kernel IR, which both backends (CUDA C++ for NVRTC, LLVM
// NVPTX) lower.
//
// One kernel reads a high-precision [rows, cols] tensor once and, fused as
// the description asks:
//   v = x                       (or x * act'(pre) with dact: the gradient
//                                through the activation, from the saved
//                                pre-activation)
//   amax   = max |v|            (NaN-propagating: a NaN makes amax NaN)
//   dbias  = column sums of v   (per 128-row tile; a second kernel adds the
//                                tiles in order, so the result is
//                                deterministic)
//   rowwise    = fp8(v * scale) as [rows, cols]
//   columnwise = fp8(v * scale) as [cols, rows]
// Casts round to nearest even and saturate to the format's largest finite
// value (cvt.rn.satfinite); NaN stays NaN.
//
// Current scaling runs the amax-only variant first and then the cast with
// `scale_from_amax`, so it reads its input twice: the data dependency (the
// scale needs the whole tensor's amax) allows no more fusion than that.
#pragma once

#include <string>

#include "codegen/ir/ir.hpp"
#include "codegen/kernels/kernel_source.hpp"
#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

struct QuantizeKernel {
  ElemType input = ElemType::bf16;   // bf16, fp16 or fp32
  ElemType format = ElemType::e4m3;  // e4m3 or e5m2
  bool rowwise = true;
  bool columnwise = false;
  bool amax = false;
  bool dbias = false;
  Activation dact = Activation::none;
  // The scale is computed in the kernel from an amax already reduced
  // (current scaling) instead of read from a scale buffer (delayed).
  bool scale_from_amax = false;
  bool pow2_scale = false;  // with scale_from_amax: round the scale down to 2^k
  // Columnwise output leaves as 16-byte stores (a warp writes four columns'
  // 128-byte segments per store) instead of 4-byte ones (one segment per
  // store), where rows % 16 == 0 and the output is 16-byte aligned; else as
  // before. An experiment for the cast + transpose's byte rate: a quarter of
  // the store instructions for the same bytes. Not measured yet.
  bool wide_column_stores = false;

  std::string name() const;  // unique per variant; also the entry point's name
  bool operator==(const QuantizeKernel&) const = default;
};

// The tile one thread block handles; launch grid = ceil(cols / kTile) x ceil(rows / kTile).
// (Two experiments left the description once measured on the H200, figures in
// bench/results/quantize_h200_2026-12-02_row_group.json and README: walking
// groups of 8-128 row tiles down before across took 0.6-4.5% longer, and
// capping registers for five blocks per SM instead of four was within noise.)
inline constexpr int kQuantizeTile = 128;
inline constexpr int kQuantizeThreads = 256;

// Kernel arguments, in order (all pointers are device pointers; unused ones may be null):
//   const IN* x, const IN* pre_activation, const float* scale, const unsigned* amax_in,
//   uint8* rowwise, uint8* columnwise, unsigned* amax_out (float bits, atomic max),
//   float* dbias_partial ([ceil(rows / 128)][cols]), float* scale_out (current scaling:
//   [0] = the scale applied, [4] = its inverse, 16 bytes on), int rows, int cols
// build_ir throws std::invalid_argument for a description that makes no
// sense (a non-FP8 format, an input that is not bf16, fp16 or fp32);
// emit_cuda is its CUDA print.
ir::Kernel build_ir(const QuantizeKernel& kernel);
KernelSource emit_cuda(const QuantizeKernel& kernel);

// Adds the dbias tile partials in tile order and stores the sum in `output`
// (fp32, or bf16 / fp16 rounded once to nearest even). Arguments: OUT* dbias,
// const float* partial, int tiles, int cols. Grid ceil(cols / (256 /
// slices)), block 256.
// slices 1: a thread per column adds every row in order (the quantize and
// epilogue kernels' contract, which their CPU references reproduce bit for
// bit). slices S > 1: a column's rows split into S runs of ceil(tiles / S),
// each added in order by its own thread, then the S sums added in order:
// another fixed order (the same bits run after run), with S times the
// threads at work, for the generated GEMM's one partial row per 16 rows of D.
struct DbiasReduceKernel {
  ElemType output = ElemType::fp32;
  int slices = 1;  // 1, 2, 4 or 8
  std::string name() const;
  bool operator==(const DbiasReduceKernel&) const = default;
};
ir::Kernel build_ir(const DbiasReduceKernel& kernel);
KernelSource emit_cuda(const DbiasReduceKernel& kernel);

}  // namespace fp8c
