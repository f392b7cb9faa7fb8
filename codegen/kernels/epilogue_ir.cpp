// EpilogueKernel as kernel IR (both backends print or compile this).
//
// One block of 256 threads owns 512 columns of 32 rows (forward) or 128
// rows (backward, one dbias partial per tile). Thread t takes a slot of
// eight columns (t % 64) in a quarter of the tile's rows (t / 64), so each
// thread loads its eight bias values once, and each column's dbias is its
// own thread's running sum per quarter: the order of the additions is fixed
// by the tile, not by scheduling, and the CPU reference repeats it.
//   - Vector mode (cols % 8 == 0 and every pointer aligned; the same for all
//     blocks): the slot is eight adjacent columns, loaded as 16-byte vectors
//     (two with fp32) and stored as 16-byte (FP8: 8-byte) vectors, with
//     eight rows' loads in flight per thread (four with fp32).
//   - Scalar mode (any other shape or alignment): the slot's columns are 64
//     apart, so adjacent threads still touch adjacent columns.
// Stores are plain, not streaming, as in the CUDA text this replaced: y, z
// and v are read again soon (the next GEMM, backward's dact, the block
// quantizer's staging).
//
// The arithmetic is runtime/reference/epilogue_reference's: z = x + bias
// and v = dy * act'(z) are single rounded f32 operations (the IR never
// contracts them), v is summed as rounded, act and act' are activation_ir's
// (shared with every kernel that applies them). Every store rounds to
// nearest even and writes the canonical NaN (0x7FFFFFFF for fp32 and the
// amax, 0x7FFF for bf16 / fp16), whatever NaN the arithmetic made; FP8 is
// cvt.rn.satfinite of y * scale.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/backends/cuda/cuda_printer.hpp"
#include "codegen/ir/builder.hpp"
#include "codegen/kernels/activation_ir.hpp"
#include "codegen/kernels/element_ir.hpp"
#include "codegen/kernels/epilogue.hpp"
#include "codegen/kernels/reduce_ir.hpp"

namespace fp8c {
namespace {

using namespace ir;

void validate(const EpilogueKernel& k) {
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument("epilogue kernel " + k.name() + ": " + why);
  };
  if (!is_high_precision(k.input)) fail("input must be bf16, fp16 or fp32");
  if (k.backward) {
    if (k.bias || k.store_pre || k.amax) fail("bias, store_pre and amax are forward options");
    // fp32: dz staged for a block quantize that fuses no dact, kept unrounded
    // so its FP8 codes are those of the fused CPU reference.
    if (k.output != k.input && k.output != ElemType::fp32)
      fail("backward stores v in the input type or fp32");
    if (k.activation == Activation::none && !k.dbias) fail("backward without dact or dbias");
  } else {
    if (k.dbias) fail("dbias is a backward option");
    if (!is_high_precision(k.output) && !k.fp8_output())
      fail("output must be bf16, fp16, fp32, e4m3 or e5m2");
  }
}

// What a buffer of `type` holds per element: bf16 / fp16 as their 16 bits,
// fp32 as itself, FP8 as its code.
Type storage(ElemType type) {
  if (type == ElemType::fp32) return kF32;
  return is_fp8(type) ? kU8 : kU16;
}

Expr is_nan(const Expr& v) {
  return v != v;
}

// v's bits, a NaN as 0x7FFFFFFF.
Expr canonical_bits(const Expr& v) {
  return select(is_nan(v), u32(0x7FFFFFFF), bitcast(v, kU32));
}

// v as a bf16 / fp16 element, nearest even, a NaN as 0x7FFF.
Expr half_bits(ElemType type, const Expr& v) {
  Expr h = intrinsic(type == ElemType::bf16 ? Op::f32_to_bf16 : Op::f32_to_f16, {v});
  return select(is_nan(v), constant(kU16, 0x7FFF), h);
}

// Two values as one word of bf16 / fp16 elements, lo in the low half: one
// cvt for both, then each NaN half made 0x7FFF.
Expr half_pair(Builder& b, ElemType type, const Expr& lo, const Expr& hi) {
  Expr r =
      b.let("pair", intrinsic(type == ElemType::bf16 ? Op::pack_bf16x2 : Op::pack_f16x2, {lo, hi}));
  r = b.let("pair", select(is_nan(lo), (r & u32(0xFFFF0000)) | u32(0x7FFF), r));
  return select(is_nan(hi), (r & u32(0x0000FFFF)) | u32(0x7FFF0000), r);
}

// Eight values to eight consecutive high-precision elements at p (16-byte
// aligned): one 16-byte store (two for fp32).
void store8(Builder& b, ElemType type, const Expr& p, const std::vector<Expr>& v) {
  if (type == ElemType::fp32) {
    Expr q = b.let("q", reinterpret(p, kU32x4));
    for (int h = 0; h < 2; ++h)
      b.store(q + i32(h),
              make_vector({canonical_bits(v[4 * h]), canonical_bits(v[4 * h + 1]),
                           canonical_bits(v[4 * h + 2]), canonical_bits(v[4 * h + 3])}));
    return;
  }
  std::vector<Expr> words;
  for (int w = 0; w < 4; ++w) words.push_back(half_pair(b, type, v[2 * w], v[2 * w + 1]));
  b.store(reinterpret(p, kU32x4), make_vector(words));
}

// One value to the high-precision element at p.
void store1(Builder& b, ElemType type, const Expr& p, const Expr& v) {
  if (type == ElemType::fp32)
    b.store(reinterpret(p, kU32), canonical_bits(v));
  else
    b.store(p, half_bits(type, v));
}

struct Params {
  Expr x, bias, pre, scale_in, out, pre_out, amax_out, dbias_partial, rows, cols;
};

class EpilogueBuilder {
 public:
  explicit EpilogueBuilder(const EpilogueKernel& k)
      : k_(k),
        b_(k.name(), kEpilogueThreads, kEpilogueMinBlocks),
        dact_(k.backward && k.activation != Activation::none),
        wide_(k.input == ElemType::fp32),
        rows_per_thread_(epilogue_tile_rows(k) / 4),
        chunk_(wide_ ? 4 : 8) {}

  Kernel build() {
    b_.set_summary(summary());
    const Type in = storage(k_.input).pointer_to(Space::global, true);
    p_.x = b_.param("x", in);
    p_.bias = b_.param("bias", in);
    p_.pre = b_.param("pre", in);
    p_.scale_in = b_.param("scale_in", kF32.pointer_to(Space::global, true));
    p_.out = b_.param("out", storage(k_.output).pointer_to(Space::global));
    p_.pre_out = b_.param("pre_out", storage(k_.input).pointer_to(Space::global));
    p_.amax_out = b_.param("amax_out", kU32.pointer_to(Space::global));
    p_.dbias_partial = b_.param("dbias_partial", kF32.pointer_to(Space::global));
    p_.rows = b_.param("rows", kI32);
    p_.cols = b_.param("cols", kI32);
    if (k_.dbias) colsum_ = b_.shared("colsum", kF32, 4 * kEpilogueTileCols);  // [quarter][column]
    if (k_.amax) reduce_ = b_.shared("reduce32", kU32, 32);

    t_ = b_.let("t", special(Special::tid_x));
    g_ = b_.let("g", t_ & 63);
    q_ = b_.let("q", t_ >> 6);
    Expr r0 = b_.let("r0", special(Special::ctaid_x) * (4 * rows_per_thread_));
    c0_ = b_.let("c0", special(Special::ctaid_y) * kEpilogueTileCols);
    rbeg_ = b_.let("rbeg", r0 + q_ * rows_per_thread_);
    rend_ = b_.let("rend", min(rbeg_ + rows_per_thread_, p_.rows));
    if (k_.fp8_output()) scale_ = b_.let("scale", load(p_.scale_in));
    if (k_.dbias)
      for (int j = 0; j < 8; ++j) sums_.push_back(b_.local("sum", f32(0.0f)));
    if (k_.amax) amax_bits_ = b_.local("amax_bits", u32(0));

    Expr vec = (p_.cols & 7) == 0 && aligned(p_.x, 16);
    if (k_.bias) vec = vec && aligned(p_.bias, 16);
    if (dact_) vec = vec && aligned(p_.pre, 16);
    vec = vec && aligned(p_.out, k_.fp8_output() ? 8 : 16);
    if (k_.store_pre) vec = vec && aligned(p_.pre_out, 16);
    vec_ = b_.let("vec", vec);
    b_.if_(
        vec_, [&] { vector_mode(); }, [&] { scalar_mode(); });
    if (k_.dbias) dbias_partials();
    if (k_.amax) {
      block_max_to_thread0(b_, amax_bits_, reduce_, kEpilogueThreads);
      b_.if_(t_ == 0 && Expr(amax_bits_) != u32(0),
             [&] { b_.atomic_max(p_.amax_out, amax_bits_); });
    }
    return b_.finish();
  }

 private:
  std::string summary() const {
    std::string s = k_.backward ? "backward epilogue: v = dy" : "epilogue: z = x";
    if (k_.backward) {
      if (dact_) s += " * " + std::string(to_string(k_.activation)) + "'(z)";
      if (k_.dbias) s += ", dbias partials per 128 rows";
    } else {
      if (k_.bias) s += " + bias";
      if (k_.activation != Activation::none)
        s += ", y = " + std::string(to_string(k_.activation)) + "(z)";
      if (k_.store_pre) s += ", z stored";
      if (k_.amax) s += ", amax of y";
    }
    return s + "; " + std::string(to_string(k_.input)) + " in, " +
           std::string(to_string(k_.output)) + " out";
  }

  // Forward, per slot: z = x + bias, y = act(z), the amax of y (its NaN
  // canonical). Slots past the last column hold x = bias = 0, so y = act(0)
  // = 0 and the amax is unaffected.
  void forward(const std::vector<Expr>& a, const std::vector<Expr>& bias, std::vector<Expr>& z,
               std::vector<Expr>& y) {
    for (int j = 0; j < 8; ++j) {
      z.push_back(k_.bias ? b_.let("z", a[j] + bias[j]) : a[j]);
      y.push_back(b_.let("y", activation_ir(b_, k_.activation, z[j])));
      if (k_.amax)
        b_.assign(amax_bits_, max(Expr(amax_bits_), canonical_bits(y[j]) & u32(0x7FFFFFFF)));
    }
  }

  // Backward, per slot: v = dy * act'(z) (or dy), added to the quarter's sums.
  std::vector<Expr> backward(const std::vector<Expr>& a, const std::vector<Expr>& z) {
    std::vector<Expr> v;
    for (int j = 0; j < 8; ++j) {
      v.push_back(dact_ ? b_.let("v", a[j] * activation_grad_ir(b_, k_.activation, z[j])) : a[j]);
      if (k_.dbias) b_.assign(sums_[j], Expr(sums_[j]) + v[j]);
    }
    return v;
  }

  // The raw bits of eight consecutive elements (16-byte aligned): one u32x4
  // of 16-bit elements, or two f32x4.
  std::vector<Var> raw8(const std::string& name) {
    if (wide_) return {b_.local(name, kF32x4), b_.local(name, kF32x4)};
    return {b_.local(name, kU32x4)};
  }

  void load8(const std::vector<Var>& raw, const Expr& base, const Expr& offset) {
    if (wide_) {
      Expr p = reinterpret(base + offset, kF32x4);
      b_.assign(raw[0], load(p));
      b_.assign(raw[1], load(p + i32(1)));
    } else {
      b_.assign(raw[0], load(reinterpret(base + offset, kU32x4)));
    }
  }

  std::vector<Expr> decode8(const std::vector<Expr>& raw, const std::string& name) {
    std::vector<Expr> v;
    for (const Expr& vector : raw)
      for (int k = 0; k < 4; ++k) {
        Expr w = lane(vector, k);
        if (wide_) {
          v.push_back(b_.let(name, w));
        } else if (k_.input == ElemType::bf16) {
          v.push_back(b_.let(name, bitcast(w << u32(16), kF32)));
          v.push_back(b_.let(name, bitcast(w & u32(0xFFFF0000), kF32)));
        } else {
          v.push_back(b_.let(name, intrinsic(Op::f16_to_f32, {convert(w, kU16)})));
          v.push_back(b_.let(name, intrinsic(Op::f16_to_f32, {convert(w >> u32(16), kU16)})));
        }
      }
    return v;
  }

  static std::vector<Expr> values(const std::vector<Var>& vars) {
    return {vars.begin(), vars.end()};
  }

  void vector_mode() {
    Expr c = b_.let("c", c0_ + g_ * 8);
    b_.if_(c < p_.cols, [&] {
      std::vector<Expr> bias;
      if (k_.bias) {
        const std::vector<Var> raw = raw8("raw_bias");
        load8(raw, p_.bias, wide(c));
        bias = decode8(values(raw), "b");
      }
      // The element offset of the chunk's first row, at column c.
      Expr start = wide(rbeg_) * wide(p_.cols) + wide(c);
      if (rows_per_thread_ == chunk_) {
        // One chunk per thread (forward, 16-bit input): no loop to run once.
        b_.if_(rbeg_ < rend_, [&] { vector_chunk(rbeg_, start, bias); });
        return;
      }
      Var first = b_.local("first", start);
      b_.for_("rb", rbeg_, rend_, i32(chunk_), [&](Expr rb) {
        vector_chunk(rb, first, bias);
        b_.assign(first, Expr(first) + wide(p_.cols * chunk_));
      });
    });
  }

  // Rows rb .. rb + chunk - 1 (those before rend) of the thread's slot;
  // `first`: the element offset of row rb's slot. Row i's offset is first +
  // i * cols, the product in 32 bits: the launcher allows at most 65535
  // column tiles, so cols * chunk < 2^31. A 64-bit offset per row, shared by
  // its load and its store, would keep eight register pairs live across the
  // chunk (the compilers hoist the common product).
  void vector_chunk(const Expr& rb, const Expr& first, const std::vector<Expr>& bias) {
    b_.comment("all of the chunk's loads are issued before any is used");
    std::vector<Expr> offset, in_rows;
    std::vector<std::vector<Var>> rx, rp;
    Expr row0 = b_.let("row0", first);
    for (int i = 0; i < chunk_; ++i) {
      in_rows.push_back(b_.let("live", rb + i < rend_));
      offset.push_back(i == 0 ? row0 : row0 + wide(p_.cols * i));
      rx.push_back(raw8("rx"));
      if (dact_) rp.push_back(raw8("rp"));
      b_.if_(in_rows[i], [&] {
        load8(rx[i], p_.x, offset[i]);
        if (dact_) load8(rp[i], p_.pre, offset[i]);
      });
    }
    for (int i = 0; i < chunk_; ++i)
      b_.if_(in_rows[i], [&] {
        const std::vector<Expr> a = decode8(values(rx[i]), "a");
        if (k_.backward) {
          const std::vector<Expr> z = dact_ ? decode8(values(rp[i]), "p") : a;
          store8(b_, k_.output, p_.out + offset[i], backward(a, z));
          return;
        }
        std::vector<Expr> z, y;
        forward(a, bias, z, y);
        if (k_.store_pre) store8(b_, k_.input, p_.pre_out + offset[i], z);
        if (!k_.fp8_output()) return store8(b_, k_.output, p_.out + offset[i], y);
        // fp8(y * scale), eight codes as one 8-byte store.
        std::vector<Expr> words;
        for (int w = 0; w < 2; ++w) {
          const auto code = [&](int j) { return y[4 * w + j] * scale_; };
          words.push_back(fp8_pair(k_.output, code(0), code(1)) |
                          (fp8_pair(k_.output, code(2), code(3)) << u32(16)));
        }
        b_.store(reinterpret(p_.out + offset[i], kU32x2), make_vector(words));
      });
  }

  // A value per slot column (c0 + g + 64 j), 0 past the last column.
  std::vector<Expr> scalar_loads(const Expr& base, const Expr& row, const std::vector<Expr>& col,
                                 const std::vector<Expr>& live, const std::string& name) {
    std::vector<Expr> v;
    for (int j = 0; j < 8; ++j) {
      Var x = b_.local(name, f32(0.0f));
      b_.if_(live[j],
             [&] { b_.assign(x, element_value(k_.input, load(base + (row + wide(col[j]))))); });
      v.push_back(x);
    }
    return v;
  }

  void scalar_mode() {
    std::vector<Expr> col, live;
    for (int j = 0; j < 8; ++j) {
      col.push_back(b_.let("col", c0_ + g_ + 64 * j));
      live.push_back(b_.let("in_cols", col[j] < p_.cols));
    }
    std::vector<Expr> bias;
    if (k_.bias) bias = scalar_loads(p_.bias, i64(0), col, live, "b");
    b_.for_("r", rbeg_, rend_, i32(1), [&](Expr r) {
      Expr row = b_.let("row", wide(r) * wide(p_.cols));
      const std::vector<Expr> a = scalar_loads(p_.x, row, col, live, "a");
      if (k_.backward) {
        const std::vector<Expr> z = dact_ ? scalar_loads(p_.pre, row, col, live, "p") : a;
        const std::vector<Expr> v = backward(a, z);
        for (int j = 0; j < 8; ++j)
          b_.if_(live[j], [&] { store1(b_, k_.output, p_.out + (row + wide(col[j])), v[j]); });
        return;
      }
      std::vector<Expr> z, y;
      forward(a, bias, z, y);
      for (int j = 0; j < 8; ++j)
        b_.if_(live[j], [&] {
          Expr at = b_.let("at", row + wide(col[j]));
          if (k_.store_pre) store1(b_, k_.input, p_.pre_out + at, z[j]);
          if (k_.fp8_output())
            b_.store(p_.out + at, convert(fp8_pair(k_.output, y[j] * scale_, f32(0.0f)), kU8));
          else
            store1(b_, k_.output, p_.out + at, y[j]);
        });
    });
  }

  // Quarter sums to shared memory, then each column's four in quarter order.
  void dbias_partials() {
    for (int j = 0; j < 8; ++j) {
      Expr column = select(vec_, g_ * 8 + j, g_ + 64 * j);
      b_.store(colsum_ + (q_ * kEpilogueTileCols + column), Expr(sums_[j]));
    }
    b_.sync_threads();
    b_.for_(
        "k", i32(0), i32(kEpilogueTileCols / kEpilogueThreads), i32(1),
        [&](Expr k) {
          Expr cc = b_.let("cc", t_ + k * kEpilogueThreads);
          b_.if_(c0_ + cc < p_.cols, [&] {
            Var total = b_.local("total", load(colsum_ + cc));
            for (int quarter = 1; quarter < 4; ++quarter)
              b_.assign(total, Expr(total) + load(colsum_ + (cc + quarter * kEpilogueTileCols)));
            Expr at = wide(special(Special::ctaid_x)) * wide(p_.cols) + wide(c0_ + cc);
            b_.store(p_.dbias_partial + at, Expr(total));
          });
        },
        1);
  }

  const EpilogueKernel& k_;
  Builder b_;
  const bool dact_, wide_;
  const int rows_per_thread_, chunk_;
  Params p_;
  Expr colsum_, reduce_, t_, g_, q_, c0_, rbeg_, rend_, scale_, vec_;
  std::vector<Var> sums_;
  Var amax_bits_;
};

}  // namespace

std::string EpilogueKernel::name() const {
  // Appends one piece at a time: GCC 12 warns (-Wrestrict, falsely) on
  // "literal" + std::string temporaries here.
  std::string n = backward ? "epilogue_bwd_" : "epilogue_";
  n += to_string(input);
  if (backward) {
    if (activation != Activation::none) (n += "_d") += to_string(activation);
    if (dbias) n += "_dbias";
    if (output != input) (n += "_to_") += to_string(output);
    return n;
  }
  if (bias) n += "_bias";
  if (activation != Activation::none) (n += "_") += to_string(activation);
  if (store_pre) n += "_z";
  (n += "_to_") += to_string(output);
  if (amax) n += "_amax";
  return n;
}

ir::Kernel build_ir(const EpilogueKernel& k) {
  validate(k);
  return EpilogueBuilder(k).build();
}

KernelSource emit_cuda(const EpilogueKernel& k) {
  auto ir = std::make_shared<const ir::Kernel>(build_ir(k));
  return {k.name(), k.name(), cuda::print(*ir), {}, SourceLanguage::cuda, ir};
}

}  // namespace fp8c
