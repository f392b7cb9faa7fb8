// ScaleUpdateKernel as kernel IR (both backends print or compile this).
//
// Block k owns tensor k. The history moves one slot down in chunks of 256,
// the last chunk first: a chunk reads its old values, waits, then writes
// them one slot on, which only overwrites the first slot of the chunk after
// it, already read. The amax over the new window is a max of |x| bits
// (NaN sorts above Inf, so it wins), reduced across the block. Thread 0
// then does the scalar part. The constant fp8_max * 2^-margin is computed
// here on the host with the CPU numerics' own ldexp and carried as an exact
// f32 constant, so both sides divide the same float; the IR's f32 division
// is IEEE round to nearest, without flushing subnormals, in both backends.
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "codegen/backends/cuda/cuda_printer.hpp"
#include "codegen/ir/builder.hpp"
#include "codegen/kernels/reduce_ir.hpp"
#include "codegen/kernels/scale_update.hpp"
#include "codegen/numerics/fp8.hpp"

namespace fp8c {
namespace {

using namespace ir;

Kernel scale_update(const ScaleUpdateKernel& k) {
  Builder b(k.name(), kScaleUpdateThreads);
  b.set_summary("delayed-scaling update of " + std::to_string(k.tensors()) +
                " tensors: history shift, amax, scale, scale_inv");
  const Type f32_ptr = kF32.pointer_to(Space::global);
  const Type f32_const = kF32.pointer_to(Space::global, true);
  Expr history = b.param("history", f32_ptr);
  Expr amax_in = b.param("amax_in", f32_const);
  // scale_out may be previous_scale (updated in place): neither is restrict.
  Expr previous_scale = b.param("previous_scale", f32_const, false);
  Expr scale_out = b.param("scale_out", f32_ptr, false);
  Expr scale_inv_out = b.param("scale_inv_out", f32_ptr);
  Expr guard = k.guard > 0 ? b.param("guard", f32_const) : Expr();
  Expr reduce = k.rule == AmaxAlgo::max ? b.shared("reduce32", kU32, 32) : Expr();
  const int history_length = static_cast<int>(k.history_length);
  Expr tensor = b.let("tensor", special(Special::ctaid_x));
  Expr t = b.let("t", special(Special::tid_x));
  if (k.guard > 0) {
    b.comment(
        "the NaN verdict: every block reads the same floats and returns before its first "
        "write (and before any barrier) if one is NaN");
    b.for_("g", i32(0), i32(k.guard), i32(1), [&](Expr g) {
      b.if_(abs_bits(load(guard + g)) > u32(0x7F800000), [&] { b.return_(); });
    });
  }
  Expr h = b.let("h", history + wide(tensor) * i64(history_length));
  Expr newest = b.let("newest", load(amax_in + tensor));
  Var amax_bits = b.local("amax_bits", u32(0));
  const int chunks = (history_length - 1) / 256 + 1;
  b.comment("the chunks of 256 from the last to the first");
  b.for_("c", i32(0), i32(chunks), i32(1), [&](Expr c) {
    Expr i = b.let("i", (i32(chunks - 1) - c) * 256 + t);
    Var old = b.local("old", f32(0.0f));
    b.if_(i < history_length, [&] { b.assign(old, load(h + i)); });
    b.sync_threads();
    b.if_(i + 1 < history_length, [&] {
      b.store(h + (i + 1), Expr(old));
      b.assign(amax_bits, max(Expr(amax_bits), abs_bits(old)));
    });
    b.sync_threads();
  });
  b.if_(t == 0, [&] {
    b.store(h, newest);
    b.assign(amax_bits, max(Expr(amax_bits), abs_bits(newest)));
  });
  // Rule most_recent: the newest amax as it is (a negative one keeps the previous scale).
  Expr amax = newest;
  if (k.rule == AmaxAlgo::max) {
    block_max_to_thread0(b, amax_bits, reduce, kScaleUpdateThreads);
    amax = b.let("amax", bitcast(amax_bits, kF32));
  }
  b.if_(t == 0, [&] {
    // fp8_max * 2^-margin of this block's tensor.
    Expr scaled_max = f32(std::ldexp(numerics::fp8_max(k.formats.back()), -k.margin));
    for (int i = k.tensors() - 2; i >= 0; --i)
      scaled_max = select(
          tensor == i,
          f32(std::ldexp(numerics::fp8_max(k.formats[static_cast<std::size_t>(i)]), -k.margin)),
          scaled_max);
    Expr at = b.let("at", tensor * k.scale_stride);
    Var scale = b.local("scale", load(previous_scale + at));
    b.comment("positive, finite and nonzero, tested on the bits: a subnormal amax counts");
    Expr bits = b.let("bits", bitcast(amax, kU32));
    b.if_(bits != u32(0) && bits < u32(0x7F800000), [&] {
      b.assign(scale, scaled_max / amax);
      b.if_(bitcast(scale, kU32) == u32(0x7F800000),
            [&] { b.assign(scale, f32(std::numeric_limits<float>::max())); });
    });
    b.store(scale_out + at, Expr(scale));
    b.store(scale_inv_out + at, f32(1.0f) / Expr(scale));
  });
  return b.finish();
}

}  // namespace

std::string ScaleUpdateKernel::name() const {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on
  // "literal" + std::string temporaries here.
  std::string n = "scale_update_";
  (n += std::to_string(formats.size())) += "_h";
  (n += std::to_string(history_length)) += "_m";
  if (margin < 0) n += "n";
  n += std::to_string(margin < 0 ? -margin : margin);
  n += rule == AmaxAlgo::max ? "_max_" : "_recent_";
  for (ElemType f : formats) n += f == ElemType::e4m3 ? '4' : '5';
  if (scale_stride != 1) (n += "_s") += std::to_string(scale_stride);
  if (guard > 0) (n += "_g") += std::to_string(guard);
  return n;
}

ir::Kernel build_ir(const ScaleUpdateKernel& k) {
  if (k.formats.empty()) throw std::invalid_argument("scale update: no tensors");
  if (k.history_length == 0) throw std::invalid_argument("scale update: empty history");
  if (k.history_length > 0x7FFFFF00u)
    throw std::invalid_argument("scale update: a history of 2^31 - 256 or more");
  if (k.margin < -100 || k.margin > 100)
    throw std::invalid_argument("scale update: |margin| must be at most 100");
  if (k.scale_stride < 1) throw std::invalid_argument("scale update: scale_stride below 1");
  if (k.guard < 0) throw std::invalid_argument("scale update: negative guard");
  for (ElemType f : k.formats) require_fp8(f, "scale update format");
  return scale_update(k);
}

KernelSource emit_cuda(const ScaleUpdateKernel& k) {
  auto ir = std::make_shared<const ir::Kernel>(build_ir(k));
  return {k.name(), k.name(), cuda::print(*ir), {}, SourceLanguage::cuda, ir};
}

}  // namespace fp8c
