// DequantizeKernel as kernel IR (both backends print or compile this).
//
// One block of 256 threads owns a 64 (outer) x 128 (inner) tile. A thread
// takes four adjacent inner elements (one 32-bit word of FP8 codes) in eight
// rows, 8 apart; a warp reads 32 contiguous bytes in each of four rows. Each
// thread works out its elements' segment, data offset and scale column once
// (divisions by runtime extents), so a row costs a load, a multiply and a
// store per element. Codes are decoded two at a time with
// cvt.rn.f16x2.{e4m3x2,e5m2x2}, exact, then widened to fp32.
//   - Word loads (inner % 4 == 0, segment % 4 == 0, data 4-byte aligned):
//     the eight rows' words (and their block scales) are all loaded before
//     the first is decoded, so each thread has eight loads in flight; a
//     word's four elements share a block.
//   - Otherwise each code is loaded on its own, row by row, each element
//     with its own segment and block.
//   - Rowwise data: the four results leave as one 8-byte (fp32: 16-byte)
//     store when the shape and pointer allow, else element by element.
//   - Columnwise data (transpose): the tile is staged in shared memory as
//     floats, [128 inner][64 outer + 1] (the pad, and the lane-to-element map,
//     keep the stores conflict-free), then each warp writes whole output rows,
//     two elements per lane (one 4-byte, fp32: 8-byte, store when aligned).
// The two kinds of load are two copies of the row loop, chosen once, so the
// word loop carries no per-element offsets.
//
// Bits: every product is canonicalised (a NaN becomes 0x7FFFFFFF), and a
// NaN stored as bf16 or fp16 is 0x7FFF whatever the conversion instruction
// makes of it (runtime/reference/element_store.hpp's rules). The per-tensor
// multiplier is 1 / s, one IEEE division (the IR's f32 division is div.rn in
// both backends); E8M0 codes are 2^(code - 127), code 0 the subnormal
// 2^-127, 0xFF NaN (numerics::e8m0_to_float).
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/backends/cuda/cuda_printer.hpp"
#include "codegen/ir/builder.hpp"
#include "codegen/kernels/cuda_prelude.hpp"
#include "codegen/kernels/dequantize.hpp"
#include "codegen/kernels/element_ir.hpp"
#include "codegen/kernels/reduce_ir.hpp"

namespace fp8c {
namespace {

using namespace ir;

constexpr int kTilePitch = kDequantizeTileOuter + 1;  // floats per staged row: padded

Expr canonical_nan() {
  return bitcast(u32(0x7FFFFFFF), kF32);
}

// codegen/numerics' canonical NaN: the one fp32 NaN a result may be.
Expr canonical(Builder& b, Expr v) {
  Expr x = b.let("x", std::move(v));
  return select(x != x, canonical_nan(), x);
}

// numerics::e8m0_to_float: 2^(code - 127); code 0 is the subnormal 2^-127,
// 0xFF is NaN.
Expr e8m0_value(Builder& b, Expr code) {
  Expr c = b.let("code", convert(std::move(code), kU32));
  return bitcast(select(c == 0xFF, u32(0x7FFFFFFF), select(c == 0, u32(0x00400000), c << 23)),
                 kF32);
}

// Two FP8 codes (u16, low byte first) as floats, exactly: every FP8 value is
// an fp16 value. `hi` may be null (one code, in the low byte). NaN codes give
// a NaN that the caller's canonicalisation fixes.
void decode2(Builder& b, ElemType format, Expr codes, const Var& lo, const Var* hi) {
  Expr halves =
      b.let("halves",
            intrinsic(format == ElemType::e4m3 ? Op::unpack_e4m3x2 : Op::unpack_e5m2x2, {codes}));
  b.assign(lo, intrinsic(Op::f16_to_f32, {convert(halves, kU16)}));
  if (hi) b.assign(*hi, intrinsic(Op::f16_to_f32, {convert(halves >> 16, kU16)}));
}

// Two values as one word of bf16 or fp16 bits, `lo` in the low half; NaN
// halves 0x7FFF, set here rather than left to the conversion's NaN rule (the
// values are canonical already; the bits must not depend on the instruction).
// The emulation cannot see this fix: its host twins canonicalise themselves.
Expr pack2(Builder& b, ElemType output, Expr lo, Expr hi) {
  Expr r = b.let("packed",
                 intrinsic(output == ElemType::bf16 ? Op::pack_bf16x2 : Op::pack_f16x2, {lo, hi}));
  Expr with_lo = b.let("packed", select(lo != lo, (r & u32(0xFFFF0000)) | u32(0x7FFF), r));
  return select(hi != hi, (with_lo & u32(0x0000FFFF)) | u32(0x7FFF0000), with_lo);
}

// One value to one element of `output`, NaN canonical.
void store_element(Builder& b, ElemType output, Expr p, Expr v) {
  if (output == ElemType::fp32) return b.store(p, canonical(b, v));
  Expr x = b.let("x", v);
  Expr bits =
      b.let("bits", intrinsic(output == ElemType::bf16 ? Op::f32_to_bf16 : Op::f32_to_f16, {x}));
  b.store(p, select(x != x, constant(kU16, 0x7FFF), bits));
}

// Four consecutive elements (8-byte aligned, fp32: 16-byte aligned).
void store4(Builder& b, ElemType output, Expr p, const std::vector<Var>& v) {
  if (output == ElemType::fp32)
    return b.store(reinterpret(p, kF32x4), make_vector({v[0], v[1], v[2], v[3]}));
  Expr w0 = pack2(b, output, v[0], v[1]);
  Expr w1 = pack2(b, output, v[2], v[3]);
  b.store(reinterpret(p, kU32x2), make_vector({w0, w1}));
}

// Two consecutive elements (4-byte aligned, fp32: 8-byte aligned).
void store2(Builder& b, ElemType output, Expr p, Expr lo, Expr hi) {
  if (output == ElemType::fp32)
    return b.store(reinterpret(p, kU32x2), make_vector({bitcast(lo, kU32), bitcast(hi, kU32)}));
  b.store(reinterpret(p, kU32), pack2(b, output, lo, hi));
}

// The max of every thread's `v` to *amax_out (atomic max of float bits),
// skipped when it is 0.
void block_amax(Builder& b, const Var& v, Expr reduce, Expr amax_out, Expr warp, Expr lane) {
  for (int o = 16; o > 0; o >>= 1)
    b.assign(v, max(Expr(v), intrinsic(Op::shfl_xor, {Expr(v), i32(o)})));
  b.if_(lane == 0, [&] { b.store(reduce + warp, Expr(v)); });
  b.sync_threads();
  b.if_(warp == 0, [&] {
    Var m = b.local("block_max", u32(0));
    b.if_(lane < kDequantizeThreads / 32, [&] { b.assign(m, load(reduce + lane)); });
    for (int o = 16; o > 0; o >>= 1)
      b.assign(m, max(Expr(m), intrinsic(Op::shfl_xor, {Expr(m), i32(o)})));
    b.if_(lane == 0 && Expr(m) != 0, [&] { b.atomic_max(amax_out, m); });
  });
}

std::string summary(const DequantizeKernel& k) {
  std::string s = std::string(to_string(k.format)) + " data, " + scaling_tag(k.scaling) +
                  " scales, to " + std::string(to_string(k.output));
  if (k.transpose) s += ", transposed";
  if (k.amax) s += ", with amax";
  return s + " (64x128 tiles)";
}

Kernel dequantize(const DequantizeKernel& k) {
  const bool per_tensor = k.scaling == Scaling::per_tensor;
  const bool mx = k.scaling == Scaling::mx_1x32;
  const int block_outer = k.scaling == Scaling::block_128x128 ? 128 : 1;
  const int block_inner = mx ? 32 : 128;
  const bool wide_out = k.output == ElemType::fp32;
  // A minimum of blocks per SM, which caps the registers: four where the
  // data goes straight out (without one, ptxas sized registers for six and
  // spilled); where it is transposed, six, what the staged tile's shared
  // memory allows (LLVM's build took 64 registers, four blocks, 9% slower
  // than NVRTC's 39 at six), five for MX, whose LLVM build spills at six.
  const int min_blocks = !k.transpose ? 4 : mx ? 5 : 6;
  Builder b(k.name(), kDequantizeThreads, min_blocks);
  b.set_summary(summary(k));
  Expr data = b.param("data", kU8.pointer_to(Space::global, true));
  Expr tensor_scale = b.param("tensor_scale", kF32.pointer_to(Space::global, true));
  Expr block_scales = b.param("block_scales", kU8.pointer_to(Space::global, true));
  Expr out = b.param("out", (wide_out ? kF32 : kU16).pointer_to(Space::global));
  Expr amax_out = b.param("amax_out", kU32.pointer_to(Space::global));
  Expr outer = b.param("outer", kI32);
  Expr inner = b.param("inner", kI32);
  Expr segments = b.param("segments", kI32);
  Expr segmented = b.param("segmented", kI32);
  Expr tile = k.transpose ? b.shared("tile", kF32, kDequantizeTileInner * kTilePitch) : Expr();
  Expr reduce = k.amax ? b.shared("reduce32", kU32, 32) : Expr();

  Expr t = b.let("t", special(Special::tid_x));
  Expr warp = b.let("warp", t >> 5), lane = b.let("lane", t & 31);
  b.comment("which four inner elements (g), and the first of the thread's rows (8 apart)");
  Expr g = b.let("g", (warp & 3) * 8 + (lane & 7));
  Expr row = b.let("row", (warp >> 2) * 4 + (lane >> 3));
  Expr o0 = b.let("o0", special(Special::ctaid_x) * kDequantizeTileOuter);
  Expr n0 = b.let("n0", special(Special::ctaid_y) * kDequantizeTileInner);
  Expr first = b.let("first", n0 + g * 4);            // the first of the four inner elements
  Expr seg_len = b.let("seg_len", inner / segments);  // the launcher checks it divides
  Expr is_segmented = b.let("is_segmented", segmented != 0);
  Expr row_stride = b.let("row_stride", select(is_segmented, wide(seg_len), wide(inner)));
  Expr seg_blocks, scale_row_stride, scale_rows;
  if (!per_tensor) {
    seg_blocks = b.let("seg_blocks", (seg_len + (block_inner - 1)) / block_inner);
    scale_row_stride = b.let("scale_row_stride", select(is_segmented, wide(seg_blocks),
                                                        wide(segments) * wide(seg_blocks)));
    scale_rows = b.let("scale_rows",
                       wide(block_outer == 1 ? outer : (outer + (block_outer - 1)) / block_outer));
  }
  Expr word_loads = b.let("word_loads", (inner & 3) == 0 && (seg_len & 3) == 0 && aligned(data, 4));
  Expr tensor_mult = per_tensor ? b.let("tensor_mult", f32(1.0f) / load(tensor_scale)) : Expr();
  Var amax_bits = k.amax ? b.local("amax_bits", u32(0)) : Var{};

  // Where element `first + j` lives: its column's data offset (plus
  // row * row_stride) and scale offset (plus block row * scale_row_stride).
  struct Column {
    Expr data, scale;
  };
  const auto column_of = [&](int j) {
    Expr n = b.let("n", j == 0 ? first : first + j);
    Var seg = b.local("seg", i32(0));
    b.if_(segments > 1, [&] { b.assign(seg, n / seg_len); });
    Expr m = b.let("m", n - seg * seg_len);
    Column c;
    c.data = b.let("data_col", select(is_segmented,
                                      wide(seg) * wide(outer) * wide(seg_len) + wide(m), wide(n)));
    if (!per_tensor) {
      Expr block = wide(m / block_inner);
      c.scale =
          b.let("scale_col", select(is_segmented, wide(seg) * scale_rows * wide(seg_blocks) + block,
                                    wide(seg) * wide(seg_blocks) + block));
    }
    return c;
  };
  // Offsets in 64 bits from the thread's first row (rows 8 apart), so both
  // backends may fold them into a base and a stride.
  Expr row64 = b.let("row64", wide(o0 + row));
  // The multiplier of row o (o64 in 64 bits) in scale column `scale_col`.
  const auto multiplier = [&](Expr o, Expr o64, Expr scale_col) -> Expr {
    if (per_tensor) return tensor_mult;
    Expr block_row = block_outer == 1 ? o64 : wide(o / block_outer);
    Expr at = b.let("scale_at", scale_col + block_row * scale_row_stride);
    return mx ? e8m0_value(b, load(block_scales + at)) : load(reinterpret(block_scales, kF32) + at);
  };
  // v = canonical(code value * multiplier), and into the amax.
  const auto scale = [&](const Var& v, Expr mult) {
    b.assign(v, canonical(b, Expr(v) * mult));
    if (k.amax) b.assign(amax_bits, max(Expr(amax_bits), abs_bits(v)));
  };
  const auto stage = [&](Expr i, const std::vector<Var>& v) {  // the transpose's tile
    for (int j = 0; j < 4; ++j)
      b.store(tile + ((g * 4 + j) * kTilePitch + row + i * 8), Expr(v[j]));
  };

  b.comment(
      "word loads: four codes a thread, all eight rows' words loaded before the first is used");
  b.if_(
      word_loads,
      [&] {
        // inner % 4 == 0 here: a word is in the tile whole or not at all,
        // and its four elements share a block.
        const Column c = column_of(0);
        Expr vector_stores =
            k.transpose ? Expr() : b.let("vector_stores", aligned(out, wide_out ? 16 : 8));
        std::vector<Expr> o, o64, live;
        std::vector<Var> w, mult;
        for (int i = 0; i < 8; ++i) {
          o.push_back(b.let("o", o0 + row + i * 8));
          o64.push_back(i == 0 ? row64 : b.let("o64", row64 + i64(i * 8)));
          live.push_back(b.let("live", o[i] < outer && first < inner));
          w.push_back(b.local("w", u32(0)));
          if (!per_tensor) mult.push_back(b.local("mult", f32(0.0f)));
          b.if_(live[i], [&] {
            b.assign(w[i], load(reinterpret(data + (c.data + o64[i] * row_stride), kU32)));
            if (!per_tensor) b.assign(mult[i], multiplier(o[i], o64[i], c.scale));
          });
        }
        for (int i = 0; i < 8; ++i) {
          std::vector<Var> v;
          for (int j = 0; j < 4; ++j) v.push_back(b.local("v", f32(0.0f)));
          b.if_(live[i], [&] {
            decode2(b, k.format, convert(w[i], kU16), v[0], &v[1]);
            decode2(b, k.format, convert(w[i] >> 16, kU16), v[2], &v[3]);
            for (int j = 0; j < 4; ++j) scale(v[j], per_tensor ? tensor_mult : Expr(mult[i]));
            if (k.transpose) return;
            Expr at = b.let("at", o64[i] * wide(inner) + wide(first));
            b.if_(
                vector_stores, [&] { store4(b, k.output, out + at, v); },
                [&] {
                  for (int j = 0; j < 4; ++j)
                    store_element(b, k.output, j == 0 ? out + at : out + (at + j), v[j]);
                });
          });
          if (k.transpose) stage(i32(i), v);
        }
      },
      [&] {
        // One code at a time, row by row: odd extents, segments or addresses.
        std::vector<Expr> column;
        std::vector<Column> c;
        for (int j = 0; j < 4; ++j) {
          column.push_back(j == 0 ? first : first + j);
          c.push_back(column_of(j));
        }
        b.for_(
            "i", i32(0), i32(8), i32(1),
            [&](Expr i) {
              Expr o = b.let("o", o0 + row + i * 8);
              Expr o64 = b.let("o64", row64 + wide(i * 8));
              std::vector<Var> v;
              for (int j = 0; j < 4; ++j) v.push_back(b.local("v", f32(0.0f)));
              b.if_(o < outer, [&] {
                Expr row_at = b.let("row_at", o64 * row_stride);
                for (int j = 0; j < 4; ++j)
                  b.if_(column[j] < inner, [&] {
                    decode2(b, k.format, convert(load(data + (c[j].data + row_at)), kU16), v[j],
                            nullptr);
                  });
                for (int j = 0; j < 4; ++j)  // else it stays 0, never stored
                  b.if_(column[j] < inner, [&] { scale(v[j], multiplier(o, o64, c[j].scale)); });
                if (k.transpose) return;
                Expr at = b.let("at", o64 * wide(inner) + wide(first));
                b.if_((inner & 3) == 0 && aligned(out, wide_out ? 16 : 8),
                      [&] { b.if_(first < inner, [&] { store4(b, k.output, out + at, v); }); },
                      [&] {
                        for (int j = 0; j < 4; ++j)
                          b.if_(column[j] < inner, [&] {
                            store_element(b, k.output, j == 0 ? out + at : out + (at + j), v[j]);
                          });
                      });
              });
              if (k.transpose) stage(i, v);
            },
            1);
      });

  if (k.transpose) {
    b.sync_threads();
    b.comment("out[n][o]: warp w writes tile rows 16w .. 16w + 15, lane l outer 2l, 2l + 1");
    Expr pairs = b.let("pairs", (outer & 1) == 0 && aligned(out, wide_out ? 8 : 4));
    b.for_(
        "r", i32(0), i32(16), i32(1),
        [&](Expr r) {
          Expr nn = b.let("nn", warp * 16 + r);
          Expr n = b.let("n", n0 + nn), o = b.let("o", o0 + lane * 2);
          b.if_(n < inner && o < outer, [&] {
            Expr lo = b.let("lo", load(tile + (nn * kTilePitch + lane * 2)));
            Expr hi = b.let("hi", load(tile + (nn * kTilePitch + lane * 2 + 1)));
            Expr at = b.let("at", wide(n) * wide(outer) + wide(o));
            b.if_(
                pairs, [&] { store2(b, k.output, out + at, lo, hi); },
                [&] {
                  store_element(b, k.output, out + at, lo);
                  b.if_(o + 1 < outer, [&] { store_element(b, k.output, out + (at + 1), hi); });
                });
          });
        },
        4);  // by 4 under both backends: NVRTC unrolled it unasked, LLVM kept the
             // loop with one shared load in flight (9% slower on the H100)
  }
  if (k.amax) block_amax(b, amax_bits, reduce, amax_out, warp, lane);
  return b.finish();
}

}  // namespace

std::string DequantizeKernel::name() const {
  std::string n = "dequantize_" + std::string(to_string(format)) + "_" + scaling_tag(scaling) +
                  "_to_" + std::string(to_string(output));
  if (transpose) n += "_t";
  if (amax) n += "_amax";
  return n;
}

ir::Kernel build_ir(const DequantizeKernel& k) {
  require_fp8(k.format, "dequantize kernel format");
  if (k.scaling != Scaling::per_tensor && k.scaling != Scaling::block_1x128 &&
      k.scaling != Scaling::block_128x128 && k.scaling != Scaling::mx_1x32)
    throw std::invalid_argument("dequantize: not an FP8 scaling: " +
                                std::string(to_string(k.scaling)));
  require_high_precision(k.output, "dequantize output");
  return dequantize(k);
}

KernelSource emit_cuda(const DequantizeKernel& k) {
  auto ir = std::make_shared<const ir::Kernel>(build_ir(k));
  return {k.name(), k.name(), cuda::print(*ir), {}, SourceLanguage::cuda, ir};
}

}  // namespace fp8c
