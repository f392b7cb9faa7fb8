// PermuteKernel as kernel IR (both backends print or compile this).
//
// Block o writes output row o: `ranks` segments of inner_local elements, each
// a contiguous copy from in[r][o]. Every segment is moved in the widest unit
// (16, 8, 4, 2 bytes, or the byte) that divides its byte length, so the
// segment starts of both buffers stay aligned to the unit; rows whose
// segments are multiples of 16 bytes move as 16-byte vectors, like a device
// copy. Unit indices are split into (rank, offset) with one 32-bit division.
// Four units per thread per round, all loads issued before any store, so
// each thread keeps up to 64 bytes in flight.
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/backends/cuda/cuda_printer.hpp"
#include "codegen/ir/builder.hpp"
#include "codegen/kernels/permute.hpp"

namespace fp8c {
namespace {

using namespace ir;

// One output row in units of `unit` (a scalar or vector type of 1 to 16 bytes).
void copy_row(Builder& b, Type unit, Expr in, Expr out, Expr ranks, Expr outer, Expr segment_bytes,
              Expr o) {
  const int bytes = unit.bytes();
  Expr units = b.let("units", convert(segment_bytes / i64(bytes), kU32));
  Expr total = b.let("total", units * convert(ranks, kU32));
  Expr dst = b.let("dst", reinterpret(out + wide(o) * wide(ranks) * segment_bytes, unit));
  Expr threads = b.let("threads", special(Special::ntid_x));
  // The launcher keeps total below 2^31 - 4 * 1024, so the i32 counter never wraps.
  b.for_("base", special(Special::tid_x), convert(total, kI32), threads * 4, [&](Expr base) {
    std::vector<Expr> u;
    std::vector<Var> v;
    for (int j = 0; j < 4; ++j) {
      u.push_back(b.let("u", convert(base + threads * j, kU32)));
      v.push_back(b.local("v", unit));
      b.if_(u[j] < total, [&] {
        Expr r = b.let("r", u[j] / units);
        Expr i = b.let("i", u[j] - r * units);
        Expr src = reinterpret(in + (wide(r) * wide(outer) + wide(o)) * segment_bytes, unit);
        b.assign(v[j], load(src + wide(i)));
      });
    }
    for (int j = 0; j < 4; ++j) b.if_(u[j] < total, [&] { b.store(dst + wide(u[j]), v[j]); });
  });
}

Kernel permute(const PermuteKernel& k) {
  Builder b(k.name(), kPermuteThreads);
  b.set_summary("rank segments [ranks][outer][inner_local] of " + std::to_string(k.element_bytes) +
                "-byte elements into rows [outer][ranks * inner_local]");
  Expr in = b.param("in", kU8.pointer_to(Space::global, true));
  Expr out = b.param("out", kU8.pointer_to(Space::global));
  Expr ranks = b.param("ranks", kI32);
  Expr outer = b.param("outer", kI32);
  Expr inner_local = b.param("inner_local", kI64);
  Expr o = b.let("o", special(Special::ctaid_x));
  Expr segment_bytes = b.let("segment_bytes", inner_local * i64(k.element_bytes));
  // The widest unit that divides a segment: 16, 8, 4, 2 bytes, else 1.
  const Type units[] = {kU32x4, kU32x2, kU32, kU16, kU8};
  const std::function<void(int)> choose = [&](int n) {
    if (n == 4) return copy_row(b, units[n], in, out, ranks, outer, segment_bytes, o);
    b.if_((segment_bytes & i64(units[n].bytes() - 1)) == i64(0),
          [&] { copy_row(b, units[n], in, out, ranks, outer, segment_bytes, o); },
          [&] { choose(n + 1); });
  };
  choose(0);
  return b.finish();
}

}  // namespace

ir::Kernel build_ir(const PermuteKernel& k) {
  if (k.element_bytes != 1 && k.element_bytes != 2 && k.element_bytes != 4)
    throw std::invalid_argument("permute: element size must be 1, 2 or 4 bytes");
  return permute(k);
}

KernelSource emit_cuda(const PermuteKernel& k) {
  auto ir = std::make_shared<const ir::Kernel>(build_ir(k));
  return {k.name(), k.name(), cuda::print(*ir), {}, SourceLanguage::cuda, ir};
}

}  // namespace fp8c
