// The ring reduce-scatter's sum (overlap = ring, codegen/lower/ring.hpp), on
// the host: the CPU reference executor's side of the GPU's RingSumKernel
// (codegen/kernels/ring_sum.hpp), with the same arithmetic as
// reduce_in_rank_order (reduce.hpp): 16-bit partials widened exactly,
// summed in fp32, rounded once (RNE) at the chain's last step. Only the
// order differs from the reduce-scatter's: a chunk sums its partials in the
// ring's order, starting at the rank after its owner.
#pragma once

#include <cstddef>

#include "collectives/dtype.hpp"

namespace fp8c::collectives {

// sum_out[i] = sum_in[i] + widen(partial[i]), or widen(partial[i]) where
// sum_in is null (a chain's first step). partial: fp32, bf16 or fp16
// (std::invalid_argument otherwise). sum_out may be sum_in.
void ring_sum_step(const float* sum_in, const void* partial, ElemType type, float* sum_out,
                   std::size_t count);

// out[i] = narrow(sum_in[i] + widen(partial[i])) in `type`: the chunk's
// owner, last in its chain.
void ring_sum_last(const float* sum_in, const void* partial, ElemType type, void* out,
                   std::size_t count);

}  // namespace fp8c::collectives
