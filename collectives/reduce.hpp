// The element-wise reduction every CPU backend uses, with one documented
// order so results are reproducible bit for bit.
//
// Order: for each element i, out[i] = (((in[0][i] op in[1][i]) op in[2][i]) op ...),
// i.e. contributions are combined left to right in rank order. The project's
// distributed oracle compares N-rank runs against 1-rank runs bitwise where
// the arithmetic is the same, so the order is part of the contract.
//
// Arithmetic per dtype:
//   float32   sum in float32, max exact
//   float64   sum in float64, max exact
//   bfloat16, float16
//             sum: every input widened to float32 exactly, summed in float32
//             in rank order, rounded ONCE to the 16-bit type, round to
//             nearest, ties to even (RNE); overflow gives infinity.
//             max: compared as float32, the winning input's bits are kept.
//   int32     sum wraps modulo 2^32 (two's complement, as on a GPU), max signed
//   uint8     sum wraps modulo 2^8, max unsigned
//   float8_*  refused: FP8 is gathered or broadcast only.
// max and NaN: the first NaN in rank order wins (NaN propagates, so a NaN
// amax on any rank is never hidden); among equal values (+0 and -0 included)
// the earliest rank's bits are kept.
// A single input (one rank) is copied bit for bit.
#pragma once

#include <cstddef>
#include <span>

#include "collectives/dtype.hpp"

namespace fp8c::collectives {

// `out` may be the very same buffer as one of the inputs (element i is read
// from every input before it is written) but must not partially overlap one.
// Throws std::invalid_argument for FP8 dtypes or an empty `inputs`.
void reduce_in_rank_order(std::span<const void* const> inputs, void* out, std::size_t count,
                          ElemType dtype, ReduceOp op);

}  // namespace fp8c::collectives
