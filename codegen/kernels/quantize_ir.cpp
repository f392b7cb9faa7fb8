// QuantizeKernel and DbiasReduceKernel as kernel IR (both backends print or
// compile these).
//
// One block of 256 threads owns a 128x128 tile. On the fast path (a whole
// tile, cols % 8 == 0, rows % 4 == 0 with columnwise output) thread t takes
// 8 adjacent columns (t % 16) of 4 adjacent rows (t / 16) per pass, two
// passes per tile:
//   - loads are 16-byte vectors, adjacent threads on adjacent columns, all
//     eight rows' loads issued before any is used (128 bytes in flight per
//     thread, 256 with fp32 input);
//   - rowwise FP8 leaves as 8-byte streaming stores straight from registers;
//   - columnwise FP8 is packed four rows to a word in registers, staged in
//     shared memory as [128 columns][33 words] (the 33rd word skews the
//     banks for readers, an XOR of the word slot for writers), then each
//     warp writes whole 128-byte column segments (or, with
//     wide_column_stores, four columns' segments per 16-byte store);
//   - dbias: each thread's 8 rows of its 8 columns summed in row order, the
//     16 row groups' sums then added in order by one thread per column.
// Partial tiles and unaligned shapes take the element-wise path, correct for
// any shape and slower; only edge tiles take it when the shape is aligned.
// The arithmetic is runtime/reference/quantize_reference's, bit for bit:
// v = x (times act'(pre) with dact), amax = max |v| as bits, fp8(v * scale)
// rounded to nearest even and saturated.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/backends/cuda/cuda_printer.hpp"
#include "codegen/ir/builder.hpp"
#include "codegen/kernels/activation_ir.hpp"
#include "codegen/kernels/element_ir.hpp"
#include "codegen/kernels/quantize.hpp"
#include "codegen/kernels/reduce_ir.hpp"
#include "codegen/numerics/fp8.hpp"

namespace fp8c {
namespace {

using namespace ir;

// The element type an input of `type` is read as: bf16 and fp16 as their
// 16 bits, fp32 as itself.
Type storage(ElemType type) {
  if (type == ElemType::fp32) return kF32;
  if (type == ElemType::bf16 || type == ElemType::fp16) return kU16;
  throw std::invalid_argument("quantize: input must be bf16, fp16 or fp32, not " +
                              std::string(to_string(type)));
}

// Eight consecutive elements of a row, from a 16-byte aligned address: one
// 16-byte load (two for fp32), issued as one expression per vector.
struct Raw8 {
  std::vector<Expr> vectors;  // u32x4 (16-bit input) or two f32x4 (fp32)
};

Raw8 load_row8(Builder& b, ElemType type, Expr base, Expr offset, const std::string& name) {
  if (type == ElemType::fp32) {
    Expr p = b.let(name + "_p", reinterpret(base + offset, kF32x4));
    return {{b.let(name, load(p)), b.let(name, load(p + i32(1)))}};
  }
  return {{b.let(name, load(reinterpret(base + offset, kU32x4)))}};
}

std::vector<Expr> decode_row8(Builder& b, ElemType type, const Raw8& raw, const std::string& name) {
  std::vector<Expr> v;
  for (const Expr& vec : raw.vectors)
    for (int k = 0; k < 4; ++k) {
      if (type == ElemType::fp32) {
        v.push_back(lane(vec, k));
      } else {
        for (Expr& e : word_values(type, lane(vec, k))) v.push_back(b.let(name, e));
      }
    }
  return v;
}

// Four values as one word of FP8 codes, the first in the low byte.
Expr pack4(ElemType format, Expr a, Expr b, Expr c, Expr d) {
  return fp8_pair(format, std::move(a), std::move(b)) |
         (fp8_pair(format, std::move(c), std::move(d)) << u32(16));
}

// numerics::scale_from_amax with fallback 1 and margin 0: fp8_max / amax, 1
// for a zero, negative, NaN or infinite amax, FLT_MAX for an infinite
// quotient, optionally rounded down to a power of two (the amax is normal
// there, so clearing the mantissa is the rounding).
Expr scale_from_amax(Builder& b, Expr amax, float fp8_max, bool pow2) {
  Var s = b.local("scale", f32(1.0f));
  b.if_(amax > f32(0.0f) && bitcast(amax, kU32) != u32(0x7F800000), [&] {
    b.assign(s, f32(fp8_max) / amax);
    b.if_(bitcast(s, kU32) == u32(0x7F800000), [&] { b.assign(s, f32(0x1.fffffep127f)); });
    if (pow2) b.assign(s, bitcast(bitcast(Expr(s), kU32) & u32(0xFF800000), kF32));
  });
  return s;
}

struct Params {
  Expr x, pre, scale_in, amax_in, row_out, col_out, amax_out, dbias_partial, scale_out, rows, cols;
};

class QuantizeBuilder {
 public:
  explicit QuantizeBuilder(const QuantizeKernel& k) : k_(k), b_(k.name(), kQuantizeThreads) {}

  Kernel build() {
    b_.set_summary(summary());
    const Type in = storage(k_.input).pointer_to(Space::global, true);
    p_.x = b_.param("x", in);
    p_.pre = b_.param("pre", in);
    p_.scale_in = b_.param("scale_in", kF32.pointer_to(Space::global, true));
    p_.amax_in = b_.param("amax_in", kU32.pointer_to(Space::global, true));
    p_.row_out = b_.param("row_out", kU8.pointer_to(Space::global));
    p_.col_out = b_.param("col_out", kU8.pointer_to(Space::global));
    p_.amax_out = b_.param("amax_out", kU32.pointer_to(Space::global));
    p_.dbias_partial = b_.param("dbias_partial", kF32.pointer_to(Space::global));
    p_.scale_out = b_.param("scale_out", kF32.pointer_to(Space::global));
    p_.rows = b_.param("rows", kI32);
    p_.cols = b_.param("cols", kI32);
    if (k_.columnwise)
      staged_ = b_.shared("staged", kU32, 128 * 33);  // columnwise FP8, [column][row / 4], skewed
    if (k_.dbias) colsum_ = b_.shared("colsum", kF32, 16 * 128);  // [row group][column]
    if (k_.amax) reduce_ = b_.shared("reduce32", kU32, 32);
    t_ = b_.let("t", special(Special::tid_x));
    tile_position();
    scale_ = scale();
    if (k_.amax) amax_bits_ = b_.local("amax_bits", u32(0));
    Expr fast = b_.let("fast", r0_ + 128 <= p_.rows && c0_ + 128 <= p_.cols && (p_.cols & 7) == 0 &&
                                   (k_.columnwise ? (p_.rows & 3) == 0 : pred(true)));
    b_.if_(
        fast, [&] { fast_path(); }, [&] { element_path(); });
    if (k_.amax) {
      block_max_to_thread0(b_, amax_bits_, reduce_, kQuantizeThreads);
      b_.if_(t_ == 0 && Expr(amax_bits_) != u32(0),
             [&] { b_.atomic_max(p_.amax_out, amax_bits_); });
    }
    return b_.finish();
  }

 private:
  std::string summary() const {
    std::string s = "per-tensor FP8 quantize of a [rows, cols] tensor (128x128 tiles):";
    if (k_.rowwise) s += " rowwise";
    if (k_.columnwise) s += " columnwise";
    if (k_.amax) s += ", amax";
    if (k_.dbias) s += ", dbias partials";
    if (k_.dact != Activation::none) s += ", d" + std::string(to_string(k_.dact));
    if (k_.scale_from_amax) s += ", scale from the amax";
    return s;
  }

  // The tile's row and column index: blockIdx.y, blockIdx.x.
  void tile_position() {
    row_tile_ = b_.let("row_tile", special(Special::ctaid_y));
    col_tile_ = b_.let("col_tile", special(Special::ctaid_x));
    r0_ = b_.let("r0", row_tile_ * 128);
    c0_ = b_.let("c0", col_tile_ * 128);
  }

  Expr scale() {
    if (!k_.scale_from_amax) return b_.let("scale", load(p_.scale_in));
    const float fp8_max = static_cast<float>(numerics::fp8_max(k_.format));
    Expr s = scale_from_amax(b_, bitcast(load(p_.amax_in), kF32), fp8_max, k_.pow2_scale);
    b_.comment("the scale and its inverse, which the GEMM reading this tensor dequantizes with");
    b_.if_(address(p_.scale_out) != constant(kU64, 0) && special(Special::ctaid_x) == 0 &&
               special(Special::ctaid_y) == 0 && t_ == 0,
           [&] {
             b_.store(p_.scale_out, s);
             // 16 bytes on: cuBLASLt reads scales from aligned addresses.
             b_.store(p_.scale_out + i32(4), f32(1.0f) / s);
           });
    return s;
  }

  // v = x, or x * act'(pre).
  Expr gradient(Expr x, Expr pre) {
    if (k_.dact == Activation::none) return x;
    return x * activation_grad_ir(b_, k_.dact, pre);
  }

  void take_amax(Expr v) {
    if (k_.amax) b_.assign(amax_bits_, max(Expr(amax_bits_), abs_bits(v)));
  }

  Expr scaled(Expr v) { return v * scale_; }

  void fast_path() {
    Expr g = b_.let("g", t_ & 15), q = b_.let("q", t_ >> 4);
    Expr c = b_.let("c", c0_ + 8 * g);
    const auto row_offset = [&](int i) {
      return wide(r0_ + 64 * (i >> 2) + 4 * q + (i & 3)) * wide(p_.cols) + wide(c);
    };
    std::vector<Raw8> raw, raw_pre;
    for (int i = 0; i < 8; ++i) raw.push_back(load_row8(b_, k_.input, p_.x, row_offset(i), "raw"));
    if (k_.dact != Activation::none)
      for (int i = 0; i < 8; ++i)
        raw_pre.push_back(load_row8(b_, k_.input, p_.pre, row_offset(i), "raw_pre"));
    std::vector<Var> sums;
    if (k_.dbias)
      for (int j = 0; j < 8; ++j) sums.push_back(b_.local("sum", f32(0.0f)));
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<std::vector<Expr>> v(4);
      for (int i = 0; i < 4; ++i) {
        const std::vector<Expr> x = decode_row8(b_, k_.input, raw[4 * pass + i], "x");
        std::vector<Expr> pre(8);
        if (k_.dact != Activation::none)
          pre = decode_row8(b_, k_.input, raw_pre[4 * pass + i], "p");
        for (int j = 0; j < 8; ++j) {
          v[i].push_back(b_.let("v", gradient(x[j], pre[j])));
          take_amax(v[i][j]);
          if (k_.dbias) b_.assign(sums[j], Expr(sums[j]) + v[i][j]);
        }
      }
      if (k_.rowwise)
        for (int i = 0; i < 4; ++i) {
          const auto word = [&](int j0) {
            return pack4(k_.format, scaled(v[i][j0]), scaled(v[i][j0 + 1]), scaled(v[i][j0 + 2]),
                         scaled(v[i][j0 + 3]));
          };
          Expr at = wide(r0_ + 64 * pass + 4 * q + i) * wide(p_.cols) + wide(c);
          b_.store(reinterpret(p_.row_out + at, kU32x2), make_vector({word(0), word(4)}), true);
        }
      if (k_.columnwise)
        for (int j = 0; j < 8; ++j) {
          // The row word's slot is XORed with the column's 32-column group, so
          // a warp's 32 stores land on (nearly) distinct banks; readers undo it.
          Expr word =
              pack4(k_.format, scaled(v[0][j]), scaled(v[1][j]), scaled(v[2][j]), scaled(v[3][j]));
          b_.store(staged_ + ((8 * g + j) * 33 + ((16 * pass + q) ^ ((g >> 2) & 3))), word);
        }
    }
    if (k_.dbias)
      for (int j = 0; j < 8; ++j) b_.store(colsum_ + (q * 128 + 8 * g + j), Expr(sums[j]));
    // The warp's amax now, not at the end: the tile's 64 values are dead
    // after this. (Left to the end, LLVM's IndVarSimplify sinks the whole
    // max chain past the column stores' loop, keeping every |v| live there:
    // 119 registers instead of 62.)
    if (k_.amax) warp_max(b_, amax_bits_);
    if (k_.columnwise || k_.dbias) b_.sync_threads();
    if (k_.columnwise) column_stores();
    if (k_.dbias)
      b_.if_(t_ < 128, [&] {
        Var total = b_.local("total", f32(0.0f));
        b_.for_(
            "i", i32(0), i32(16), i32(1),
            [&](Expr i) { b_.assign(total, Expr(total) + load(colsum_ + (i * 128 + t_))); }, 1);
        b_.store(p_.dbias_partial + (wide(row_tile_) * wide(p_.cols) + wide(c0_ + t_)), total);
      });
  }

  void column_stores() {
    Expr warp = b_.let("warp", t_ >> 5), lane_id = b_.let("lane", t_ & 31);
    const auto word_stores = [&] {
      b_.for_(
          "cc", i32(0), i32(16), i32(1),
          [&](Expr cc) {
            Expr col = b_.let("col", 16 * warp + cc);
            Expr at = wide(c0_ + col) * wide(p_.rows) + wide(r0_ + 4 * lane_id);
            b_.store(reinterpret(p_.col_out + at, kU32),
                     load(staged_ + (col * 33 + (lane_id ^ ((col >> 5) & 3)))), true);
          },
          4);
    };
    if (!k_.wide_column_stores) {
      word_stores();
      return;
    }
    // 16 bytes a lane: eight lanes cover one column's 128 rows, a warp four
    // columns per store. The four words a lane reads sit in four consecutive
    // slots (XOR of the two low bits only), and the 32 lanes of one read hit
    // 32 distinct banks (column + 4 * chunk + word).
    b_.if_((p_.rows & 15) == 0 && (address(p_.col_out) & constant(kU64, 15)) == constant(kU64, 0),
           [&] {
             Expr chunk = b_.let("chunk", lane_id & 7);
             for (int i = 0; i < 4; ++i) {
               Expr col = b_.let("col", 16 * warp + 4 * i + (lane_id >> 3));
               Expr w = b_.let("w", staged_ + col * 33);
               Expr skew = b_.let("skew", (col >> 5) & 3);
               std::vector<Expr> words;
               for (int k = 0; k < 4; ++k) words.push_back(load(w + ((4 * chunk + k) ^ skew)));
               Expr at = wide(c0_ + col) * wide(p_.rows) + wide(r0_ + 16 * chunk);
               b_.store(reinterpret(p_.col_out + at, kU32x4), make_vector(words), true);
             }
           },
           word_stores);
  }

  // Any shape: one element at a time, adjacent threads on adjacent columns.
  void element_path() {
    const auto value_at = [&](Expr offset) {
      Expr x = element_value(k_.input, load(p_.x + offset));
      Expr pre =
          k_.dact != Activation::none ? element_value(k_.input, load(p_.pre + offset)) : Expr();
      return gradient(x, pre);
    };
    b_.for_("e", t_, i32(128 * 128), i32(kQuantizeThreads), [&](Expr e) {
      Expr r = b_.let("r", r0_ + (e >> 7)), c = b_.let("c", c0_ + (e & 127));
      b_.if_(r < p_.rows && c < p_.cols, [&] {
        Expr offset = b_.let("offset", wide(r) * wide(p_.cols) + wide(c));
        Expr v = b_.let("v", value_at(offset));
        take_amax(v);
        Expr code = b_.let("code", convert(fp8_pair(k_.format, scaled(v), f32(0.0f)), kU8));
        if (k_.rowwise) b_.store(p_.row_out + offset, code);
        if (k_.columnwise) b_.store(p_.col_out + (wide(c) * wide(p_.rows) + wide(r)), code);
      });
    });
    if (k_.dbias) {
      Expr column = b_.let("column", c0_ + t_);
      b_.if_(t_ < 128 && column < p_.cols, [&] {
        Var total = b_.local("total", f32(0.0f));
        b_.for_("r", r0_, min(p_.rows, r0_ + 128), i32(1), [&](Expr r) {
          b_.assign(total, Expr(total) + value_at(wide(r) * wide(p_.cols) + wide(column)));
        });
        b_.store(p_.dbias_partial + (wide(row_tile_) * wide(p_.cols) + wide(column)), total);
      });
    }
  }

  const QuantizeKernel& k_;
  Builder b_;
  Params p_;
  Expr staged_, colsum_, reduce_, t_, row_tile_, col_tile_, r0_, c0_, scale_;
  Var amax_bits_;
};

Kernel dbias_reduce(const DbiasReduceKernel& k) {
  Builder b(k.name(), 256);
  b.set_summary("dbias = the sum over tiles, in tile order, of the per-tile column sums");
  Type out;
  switch (k.output) {
    case ElemType::fp32:
      out = kF32;
      break;
    case ElemType::bf16:
    case ElemType::fp16:
      out = kU16;
      break;
    default:
      throw std::invalid_argument("dbias_reduce: output must be fp32, bf16 or fp16");
  }
  Expr dbias = b.param("dbias", out.pointer_to(Space::global));
  Expr partial = b.param("partial", kF32.pointer_to(Space::global, true));
  Expr tiles = b.param("tiles", kI32);
  Expr cols = b.param("cols", kI32);
  if (k.slices != 1 && k.slices != 2 && k.slices != 4 && k.slices != 8)
    throw std::invalid_argument("dbias_reduce: slices must be 1, 2, 4 or 8");
  const int columns = 256 / k.slices;  // per block
  Expr tid = special(Special::tid_x);
  Expr c = b.let("c", special(Special::ctaid_x) * columns + tid % columns);
  Var total = b.local("total", f32(0.0f));
  if (k.slices == 1) {
    b.if_(c >= cols, [&] { b.return_(); });
    b.for_("i", i32(0), tiles, i32(1), [&](Expr i) {
      b.assign(total, Expr(total) + load(partial + (wide(i) * wide(cols) + wide(c))));
    });
  } else {
    b.comment("each slice's run of rows in order, then the slices in order");
    Expr sums = b.shared("sums", kF32, 256);
    Expr slice = b.let("slice", tid / columns);
    Expr per = b.let("per", (tiles + (k.slices - 1)) / k.slices);
    Expr first = b.let("first", slice * per);
    Expr last = b.let("last", select(first + per < tiles, first + per, tiles));
    b.if_(c < cols, [&] {
      b.for_("i", first, last, i32(1), [&](Expr i) {
        b.assign(total, Expr(total) + load(partial + (wide(i) * wide(cols) + wide(c))));
      });
    });
    b.store(sums + tid, Expr(total));
    b.sync_threads();
    b.if_(slice != 0 || c >= cols, [&] { b.return_(); });
    b.assign(total, load(sums + tid));
    for (int s = 1; s < k.slices; ++s)
      b.assign(total, Expr(total) + load(sums + (tid + s * columns)));
  }
  b.comment("kept in fp32 and rounded once, to nearest even");
  Expr value = k.output == ElemType::bf16   ? intrinsic(Op::f32_to_bf16, {Expr(total)})
               : k.output == ElemType::fp16 ? intrinsic(Op::f32_to_f16, {Expr(total)})
                                            : Expr(total);
  b.store(dbias + c, value);
  return b.finish();
}

}  // namespace

std::string QuantizeKernel::name() const {
  std::string n =
      "quantize_" + std::string(to_string(input)) + "_" + std::string(to_string(format));
  n += rowwise ? "_r" : "";
  n += columnwise ? "_c" : "";
  if (amax) n += "_amax";
  if (dbias) n += "_dbias";
  if (dact != Activation::none) n += "_d" + std::string(to_string(dact));
  if (scale_from_amax) n += pow2_scale ? "_current_pow2" : "_current";
  if (wide_column_stores) n += "_wcs";
  return n;
}

ir::Kernel build_ir(const QuantizeKernel& k) {
  require_fp8(k.format, "quantize kernel format");
  storage(k.input);  // throws for an input that is not high precision
  return QuantizeBuilder(k).build();
}

KernelSource emit_cuda(const QuantizeKernel& k) {
  auto ir = std::make_shared<const ir::Kernel>(build_ir(k));
  return {k.name(), k.name(), cuda::print(*ir), {}, SourceLanguage::cuda, ir};
}

std::string DbiasReduceKernel::name() const {
  std::string n = output == ElemType::fp32 ? std::string("dbias_reduce")
                                           : "dbias_reduce_" + std::string(to_string(output));
  if (slices != 1) n += "_s" + std::to_string(slices);
  return n;
}

ir::Kernel build_ir(const DbiasReduceKernel& k) {
  return dbias_reduce(k);
}

KernelSource emit_cuda(const DbiasReduceKernel& k) {
  auto ir = std::make_shared<const ir::Kernel>(build_ir(k));
  return {k.name(), k.name(), cuda::print(*ir), {}, SourceLanguage::cuda, ir};
}

}  // namespace fp8c
