// The element helpers the rank reductions print (cuda_rank_reduce.cpp):
// elem_t / acc_t / cmp_t, widen, narrow, add, to_cmp and is_nan_cmp for one
// reducible element type, mirroring collectives/reduce.cpp bit for bit.
// Shared with the ring sum (ring_sum.hpp), whose arithmetic must be the same.
#pragma once

#include <string>

#include "fp8c/elem_type.hpp"

namespace fp8c {

// Throws std::invalid_argument for FP8 and E8M0 (never reduced).
std::string rank_element_helpers(ElemType element);

}  // namespace fp8c
