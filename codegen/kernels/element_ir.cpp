#include "codegen/kernels/element_ir.hpp"

#include <utility>

namespace fp8c {

using namespace ir;

Expr element_value(ElemType type, Expr raw) {
  switch (type) {
    case ElemType::bf16:
      return bitcast(convert(std::move(raw), kU32) << u32(16), kF32);
    case ElemType::fp16:
      return intrinsic(Op::f16_to_f32, {std::move(raw)});
    default:
      return raw;
  }
}

std::vector<Expr> word_values(ElemType type, Expr w) {
  if (type == ElemType::bf16)
    return {bitcast(w << u32(16), kF32), bitcast(w & u32(0xFFFF0000), kF32)};
  return {intrinsic(Op::f16_to_f32, {convert(w, kU16)}),
          intrinsic(Op::f16_to_f32, {convert(w >> u32(16), kU16)})};
}

Expr fp8_pair(ElemType format, Expr lo, Expr hi) {
  return convert(intrinsic(format == ElemType::e4m3 ? Op::pack_e4m3x2 : Op::pack_e5m2x2,
                           {std::move(lo), std::move(hi)}),
                 kU32);
}

Expr aligned(Expr pointer, int bytes) {
  return (address(std::move(pointer)) & constant(kU64, bytes - 1)) == constant(kU64, 0);
}

}  // namespace fp8c
