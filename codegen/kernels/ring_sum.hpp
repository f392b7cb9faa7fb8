// One step of a ring reduce-scatter (overlap = ring, codegen/lower/ring.hpp):
// a rank chunk's partial, as the GEMM stored it, added to the running sum
// that arrived from the previous rank. The running sum travels in fp32; the
// chain's last step (the chunk's owner) rounds it once into the output. The
// arithmetic is collectives/reduce.hpp's (and rank_reduce.hpp's, whose
// helpers it shares): partials widened exactly, summed in fp32 with
// explicitly rounded adds (a NaN operand comes out quiet, Inf + -Inf is the
// default NaN), narrowed RNE once; collectives/ring_sum.hpp is the CPU side.
#pragma once

#include <string>

#include "codegen/kernels/kernel_source.hpp"
#include "fp8c/elem_type.hpp"

namespace fp8c {

struct RingSumKernel {
  ElemType element = ElemType::bf16;  // the partials' and the output's: fp32, bf16 or fp16

  std::string name() const;  // "ring_sum_bf16"
  bool operator==(const RingSumKernel&) const = default;
};

inline constexpr int kRingSumThreads = 256;

// Kernel arguments, in order:
//   const float* sum_in      the running sum received (null at a chain's first step)
//   const elem_t* partial    this rank's partial of the chunk
//   void* out                float (last = 0) or elem_t (last = 1)
//   unsigned long long count elements
//   int last                 0: out = sum_in + partial in fp32 (partial widened
//                            when sum_in is null); 1: out = narrow(sum_in + partial)
// Grid: x any (grid-stride loop); block kRingSumThreads.
KernelSource emit_cuda(const RingSumKernel& kernel);

}  // namespace fp8c
