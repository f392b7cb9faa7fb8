// Element types and reduction operators a collective understands.
//
// Element types are fp8c's one ElemType (fp8c/elem_type.hpp, a header that
// depends on nothing). Otherwise collectives/ is kept free of the rest of
// fp8c on purpose: it sits below runtime/ and must not see the DSL or
// codegen. A device backend translates ElemType and ReduceOp to
// ncclDataType_t / ncclRedOp_t with a switch (collectives/device/nccl_library).
#pragma once

#include <cstdint>
#include <string_view>

#include "fp8c/elem_type.hpp"

namespace fp8c::collectives {

enum class ReduceOp : std::uint8_t {
  kSum,
  kMax,
};

std::string_view reduce_op_name(ReduceOp op);

// FP8 (and E8M0 scale codes) are only moved, never reduced: the project
// reduces in high precision (NCCL itself refuses FP8 reductions below sm_90).
// Reducible: fp32, fp64, bf16, fp16, i32, u8.
bool is_reducible(ElemType dtype);

// True when `value` is one of the enumerators above (guards casts from
// integers received over the wire; is_valid_elem_type for element types).
bool is_valid_reduce_op(std::uint8_t value);

}  // namespace fp8c::collectives
