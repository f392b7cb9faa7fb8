// Rank reduction: the device half of a reduce_scatter or all_reduce when all
// ranks' buffers live on one GPU (collectives/device/local_device_group). Output j
// is, element by element, in[0] op in[1] op ... op in[ranks-1] in rank order,
// with exactly collectives/reduce.hpp's arithmetic, so a single-GPU
// multi-rank run equals the CPU collectives bit for bit:
//   f32, f64  sum in the type; max keeps the winning input's bits
//   bf16, f16 sum: widened to f32 exactly, summed in rank order, rounded once
//             (RNE, by hand as collectives/narrow_float.cpp does); max
//             compares as f32 and keeps the winning input's bits
//   i32, u8   sum wraps; max signed (i32) or unsigned (u8)
// max: the first NaN in rank order wins; on ties the earliest rank's bits.
// NaN in a sum: the result is the NaN operand made quiet, and Inf + -Inf
// is the default NaN 0xFFC00000 (0xFFF8... for f64), which is what the CPU
// reference computes on x86-64. (Where two NaNs meet, which payload the CPU
// keeps depends on how its compiler orders the operands; only that case is
// not bit-exact.) One rank: the input's bits are copied.
#pragma once

#include <cstddef>
#include <string>

#include "codegen/kernels/kernel_source.hpp"
#include "fp8c/elem_type.hpp"

namespace fp8c {

enum class RankReduceOp { sum, max };

struct RankReduceKernel {
  // fp32, bf16, fp16, fp64, i32 or u8 (collectives::is_reducible); FP8 and
  // E8M0 are never reduced (name() and emit_cuda throw std::invalid_argument).
  ElemType element = ElemType::fp32;
  RankReduceOp op = RankReduceOp::sum;

  // "rank_reduce_sum_bf16"; the element as f32, bf16, f16, f64, i32 or u8.
  std::string name() const;
  bool operator==(const RankReduceKernel&) const = default;
};

// Pointer tables travel as kernel parameters (no device table to upload):
// struct RankPointers { unsigned long long p[kRankMaxRanks]; }, 512 bytes.
inline constexpr int kRankMaxRanks = 64;
inline constexpr int kRankReduceThreads = 256;

// Kernel arguments, in order:
//   RankPointers inputs      rank r's input base (element-aligned)
//   int ranks                1..kRankMaxRanks
//   unsigned long long input_stride   elements from one output's block of an
//                            input to the next output's (0: all outputs
//                            reduce the same blocks)
//   RankPointers outputs     output j's base, j = blockIdx.y
//   unsigned long long count elements per output
// Output j reads inputs[r] + j * input_stride. Grid: x any (grid-stride
// loop), y = number of outputs; block kRankReduceThreads. An output may be
// one of its own inputs (each element is read from every input before it is
// written) but must not partially overlap any input.
KernelSource emit_cuda(const RankReduceKernel& kernel);

}  // namespace fp8c
