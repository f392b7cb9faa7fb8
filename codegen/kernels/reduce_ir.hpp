// Reductions the kernels built as IR share: the amax of a block's values as
// float bits, the way every kernel of the family takes it.
#pragma once

#include "codegen/ir/builder.hpp"

namespace fp8c {

// |f| as u32 bits. For non-negative floats the unsigned order is the numeric
// order and every NaN sorts above +Inf, so an integer max propagates NaN.
ir::Expr abs_bits(ir::Expr f);

// The max of every lane's `v` over the full warp, left in every lane's `v`.
void warp_max(ir::Builder& b, const ir::Var& v);

// The max over a block of `threads` threads (a multiple of 32, at most 1024)
// of every thread's `v`, left in `v` of thread 0 (the others hold partial
// maxima). `reduce`: a shared u32 array of at least threads / 32 words, used
// by nothing else: the one barrier here orders its writes before its reads,
// and nothing after the call may write it without another barrier.
void block_max_to_thread0(ir::Builder& b, const ir::Var& v, ir::Expr reduce, int threads);

}  // namespace fp8c
