// Permute: rank segments -> contiguous along the gathered dim.
//
// An all-gather concatenates rank buffers along the OUTERMOST physical dim.
// A columnwise tensor sharded along its INNER physical dim (tokens, under
// sequence parallelism) therefore comes back as [ranks][outer][inner_local]:
// each rank's block is whole, but a row of the logical tensor is split over
// `ranks` places. Reading that buffer as [outer][ranks * inner_local] (what
// upstream TransformerEngine's sequence-parallel wgrad did) pairs the wrong
// tokens; this kernel writes the layout the GEMM expects:
//   out[o][r * inner_local + i] = in[r][o][i]
// Elements are moved as bytes: FP8 data (1), bf16 (2) or fp32 block scales (4).
#pragma once

#include <string>

#include "codegen/ir/ir.hpp"
#include "codegen/kernels/kernel_source.hpp"

namespace fp8c {

struct PermuteKernel {
  int element_bytes = 1;  // 1, 2 or 4

  std::string name() const { return "permute_segments_" + std::to_string(element_bytes) + "b"; }
  bool operator==(const PermuteKernel&) const = default;
};

inline constexpr int kPermuteThreads = 256;

// Kernel arguments, in order: const u8* in, u8* out, int ranks, int outer,
// long long inner_local (elements). Grid: one block per output row (outer),
// block kPermuteThreads. build_ir (permute_ir.cpp) throws
// std::invalid_argument for an element size other than 1, 2 or 4;
// emit_cuda is its CUDA print.
ir::Kernel build_ir(const PermuteKernel& kernel);
KernelSource emit_cuda(const PermuteKernel& kernel);

}  // namespace fp8c
