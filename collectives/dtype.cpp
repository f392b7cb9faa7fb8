#include "collectives/dtype.hpp"

namespace fp8c::collectives {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
    case DType::kUInt8:
      return 1;
    case DType::kFloat64:
      return 8;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
    case DType::kFloat8E4M3:
      return "float8_e4m3";
    case DType::kFloat8E5M2:
      return "float8_e5m2";
    case DType::kUInt8:
      return "uint8";
    case DType::kInt32:
      return "int32";
    case DType::kFloat64:
      return "float64";
  }
  return "invalid-dtype";
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
  }
  return "invalid-op";
}

bool is_fp8(DType dtype) {
  return dtype == DType::kFloat8E4M3 || dtype == DType::kFloat8E5M2;
}

bool is_valid_dtype(std::uint8_t value) {
  return value <= static_cast<std::uint8_t>(DType::kFloat64);
}

bool is_valid_reduce_op(std::uint8_t value) {
  return value <= static_cast<std::uint8_t>(ReduceOp::kMax);
}

}  // namespace fp8c::collectives
