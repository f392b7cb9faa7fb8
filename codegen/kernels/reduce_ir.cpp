#include "codegen/kernels/reduce_ir.hpp"

namespace fp8c {

using namespace ir;

Expr abs_bits(Expr f) {
  return bitcast(std::move(f), kU32) & u32(0x7FFFFFFF);
}

void warp_max(Builder& b, const Var& v) {
  for (int o = 16; o > 0; o >>= 1)
    b.assign(v, max(Expr(v), intrinsic(Op::shfl_xor, {Expr(v), i32(o)})));
}

void block_max_to_thread0(Builder& b, const Var& v, Expr reduce, int threads) {
  warp_max(b, v);
  Expr t = special(Special::tid_x);
  Expr lane = b.let("lane", t & 31), warp = b.let("warp", t >> 5);
  b.if_(lane == 0, [&] { b.store(reduce + warp, Expr(v)); });
  b.sync_threads();
  b.if_(warp == 0, [&] {
    b.assign(v, u32(0));
    b.if_(lane < threads / 32, [&] { b.assign(v, load(reduce + lane)); });
    warp_max(b, v);
  });
}

}  // namespace fp8c
