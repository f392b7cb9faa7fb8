// A kernel that uses every intrinsic of the kernel IR once (codegen/ir/ir.hpp),
// so each backend's lowering of each is compiled by the tests: the CUDA print
// by NVRTC (ir_test.cpp), the LLVM build to PTX assembled by ptxas
// (llvm_backend_test.cpp).
#pragma once

#include "codegen/ir/builder.hpp"

namespace fp8c::ir::testing {

inline Kernel every_intrinsic_kernel() {
  Builder b("every_intrinsic", 128);
  Expr in = b.param("in", kF32.pointer_to(Space::global, true));
  Expr out = b.param("out", kU32.pointer_to(Space::global));
  Expr i = b.let("i", special(Special::ctaid_x) * 128 + special(Special::tid_x));
  Expr x = b.let("x", load(index(in, i)));
  Expr y = b.let("y", load(index(in, i + 1)));
  Expr e4 = b.let("e4", intrinsic(Op::pack_e4m3x2, {x, y}));
  Expr e5 = b.let("e5", intrinsic(Op::pack_e5m2x2, {x, y}));
  Expr h = b.let("h", intrinsic(Op::f32_to_f16, {x}));
  Expr bf = b.let("bf", intrinsic(Op::f32_to_bf16, {y}));
  Expr f = b.let("f", intrinsic(Op::fma, {intrinsic(Op::f16_to_f32, {h}), x, y}));
  Expr approx = b.let("approx", intrinsic(Op::tanh_approx, {f}) + intrinsic(Op::ex2_approx, {x}) +
                                    intrinsic(Op::div_approx, {x, y}));
  Expr words =
      b.let("words", intrinsic(Op::unpack_e4m3x2, {e4}) ^ intrinsic(Op::unpack_e5m2x2, {e5}) ^
                         intrinsic(Op::pack_bf16x2, {x, approx}) ^
                         intrinsic(Op::pack_f16x2, {y, approx}));
  Expr mixed = b.let("mixed", intrinsic(Op::byte_perm, {words, convert(bf, kU32), u32(0x5140)}) +
                                  intrinsic(Op::clz, {words}) +
                                  convert(intrinsic(Op::address, {out}) & constant(kU64, 15), kU32));
  b.store(index(out, i), intrinsic(Op::shfl_xor, {mixed, i32(1)}));
  return b.finish();
}

}  // namespace fp8c::ir::testing
