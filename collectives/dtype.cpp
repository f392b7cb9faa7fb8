#include "collectives/dtype.hpp"

namespace fp8c::collectives {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
  }
  return "invalid-op";
}

bool is_reducible(ElemType dtype) {
  switch (dtype) {
    case ElemType::fp32:
    case ElemType::fp64:
    case ElemType::bf16:
    case ElemType::fp16:
    case ElemType::i32:
    case ElemType::u8:
      return true;
    case ElemType::e4m3:
    case ElemType::e5m2:
    case ElemType::e8m0:
      return false;
  }
  return false;
}

bool is_valid_reduce_op(std::uint8_t value) {
  return value <= static_cast<std::uint8_t>(ReduceOp::kMax);
}

}  // namespace fp8c::collectives
