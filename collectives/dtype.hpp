// Element types and reduction operators a collective understands.
//
// Kept free of the rest of fp8c on purpose: collectives/ sits below runtime/
// and must not see the DSL's or codegen's type system. The enumerators map
// one to one onto ncclDataType_t / ncclRedOp_t so a device backend can
// translate them with a switch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fp8c::collectives {

enum class DType : std::uint8_t {
  kFloat32,
  kBFloat16,
  kFloat16,
  kFloat8E4M3,
  kFloat8E5M2,
  kUInt8,
  kInt32,
  kFloat64,
};

enum class ReduceOp : std::uint8_t {
  kSum,
  kMax,
};

// Bytes per element.
std::size_t dtype_size(DType dtype);

// "float32", "bfloat16", ..., as used in error messages.
std::string_view dtype_name(DType dtype);

std::string_view reduce_op_name(ReduceOp op);

bool is_fp8(DType dtype);

// FP8 is only moved, never reduced: the project reduces in high precision
// (NCCL itself refuses FP8 reductions below sm_90).
inline bool is_reducible(DType dtype) {
  return !is_fp8(dtype);
}

// True when `value` is one of the enumerators above (guards casts from
// integers received over the wire).
bool is_valid_dtype(std::uint8_t value);
bool is_valid_reduce_op(std::uint8_t value);

}  // namespace fp8c::collectives
