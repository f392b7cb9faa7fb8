// BlockQuantizeKernel as kernel IR (both backends print or compile this).
//
// One block of 256 threads owns a 128 x 128 tile, which holds whole scaling
// blocks of every kind (tiles start at multiples of 128). Thread t takes the
// 8 adjacent columns 8g (g = t % 16) of the 8 rows 64p + 4q + i (q = t / 16,
// p in 0..1, i in 0..3), the layout of the per-tensor cast-transpose, and
// keeps them in registers as loaded, from the one read of the input to the
// FP8 stores:
//   1. eight 16-byte loads, all issued before any is used;
//   2. amaxes on the loaded words, not on decoded floats (16-bit inputs: two
//      magnitudes per word, compared two at a time with max.u16x2);
//   3. rowwise: a row's 128 columns sit in the 16 lanes of a half warp (MX: a
//      32-column segment in 4 lanes); shuffles that halve the rows each lane
//      keeps leave one row per lane pair (MX: two rows per lane), so each
//      scale is computed once; the multipliers go through shared memory, back
//      to the same warp; the FP8 rows leave as 8-byte stores from registers;
//   4. columnwise: partial maxima over the 8 rows of lanes t and t ^ 16 go to
//      an 8 KiB shared array, reduced down each column by one thread (MX: per
//      32-row block, two per thread); the FP8 data is packed 4 rows to a word,
//      staged in a skewed [128][33] word array (the partial maxima's space)
//      and leaves as one 128-byte column segment per warp store;
//   5. 128x128: one amax per tile, by warp shuffles and 8 shared words.
// 17-21 KB of static shared memory, no dynamic; the launch bounds cap 16-bit
// inputs at 64 registers, so 4 blocks fit on an SM (fp32 input and dact: 2).
// Edge tiles, and shapes or pointers the wide accesses cannot take (cols not
// a multiple of 8; columnwise with rows not a multiple of 4), run the same
// code with bounds-checked loads and stores (element-wise where not wide):
// out-of-range elements load as +0, which never raises an amax, and are never
// stored.
// With dact (BlockQuantizeKernel::dact) the loads read dy and the saved z and
// keep dz = dy * act'(z) in fp32 (activation_ir.hpp's act', the epilogue's,
// times dy in a multiply of its own), as an fp32 input is kept.
// The scale arithmetic (block_scale, mx_code, mx_multiplier) is
// codegen/numerics' on the amax's bits, and each element is
// fp8(v * multiplier): bit for bit the CPU reference's
// (runtime/reference/block_quantize_reference.cpp). tests/emulation runs
// this IR's host print on the CPU against the reference.
#include <cfloat>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/backends/cuda/cuda_printer.hpp"
#include "codegen/ir/builder.hpp"
#include "codegen/kernels/activation_ir.hpp"
#include "codegen/kernels/block_quantize.hpp"
#include "codegen/kernels/cuda_prelude.hpp"
#include "codegen/kernels/element_ir.hpp"
#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/mx_scale.hpp"

namespace fp8c {
namespace {

using namespace ir;

// ---- Scale arithmetic, on an amax's bits m (a magnitude: sign bit clear).

// numerics::blockwise_scale: fp8_max / amax; 1 for a zero, Inf or NaN amax;
// FLT_MAX for an infinite quotient; with pow2, rounded down to 2^k by
// clearing the mantissa (the quotient is normal: amax <= FLT_MAX).
Expr block_scale(Builder& b, Expr m, float fp8_max, bool pow2) {
  Expr quotient = b.let("quotient", f32(fp8_max) / bitcast(m, kF32));
  Expr s = select(bitcast(quotient, kU32) == u32(0x7F800000), f32(FLT_MAX), quotient);
  if (pow2) s = bitcast(bitcast(s, kU32) & u32(0xFF800000), kF32);
  return b.let("scale", select(m != u32(0) && m < u32(0x7F800000), s, f32(1.0f)));
}

// numerics::mx_block_scale with the round-up rule: the smallest 2^e with
// amax <= fp8_max * 2^e as an E8M0 code (NaN 0xFF, +Inf 0xFE). A zero amax
// takes the subnormal branch to an exponent below -127, hence code 0.
Expr mx_code(Builder& b, Expr m, int element_emax) {
  Expr biased = b.let("biased", convert(m >> u32(23), kI32));
  Var e = b.local("e", biased - 127);
  Var fraction = b.local("fraction", m & u32(0x7FFFFF));
  b.if_(biased == 0, [&] {  // subnormal: fraction * 2^-149
    Expr width = b.let("width", i32(32) - convert(intrinsic(Op::clz, {m}), kI32));
    b.assign(e, width - (1 + 149));
    b.assign(fraction, (m << convert(i32(24) - width, kU32)) & u32(0x7FFFFF));
  });
  // Significands above the element max's 1.75 need the next binade.
  Expr exponent =
      b.let("exponent", select(Expr(fraction) > u32(numerics::detail::kElementMaxFraction),
                               Expr(e) - (element_emax - 1), Expr(e) - element_emax));
  Expr code = select(exponent < -127, u32(0), convert(exponent + 127, kU32));
  return b.let("code", select(m > u32(0x7F800000), u32(0xFF),
                              select(m == u32(0x7F800000), u32(0xFE), code)));
}

// numerics::e8m0_reciprocal: the multiplier 2^(127 - code) (NaN for 0xFF,
// the subnormal 2^-127 for 0xFE).
Expr mx_multiplier(Expr code) {
  return bitcast(select(code == u32(0xFF), u32(0x7FFFFFFF),
                        select(code == u32(0xFE), u32(0x00400000), (u32(254) - code) << u32(23))),
                 kF32);
}

// ---- The kernel.

class BlockQuantizeBuilder {
 public:
  explicit BlockQuantizeBuilder(const BlockQuantizeKernel& k)
      : k_(k),
        dact_(k.dact != Activation::none),
        wide_(k.input == ElemType::fp32 || dact_),
        mx_(k.scaling == Scaling::mx_1x32),
        square_(k.scaling == Scaling::block_128x128),
        fp8_max_(numerics::fp8_max(k.format)),
        b_(k.name(), kBlockQuantizeThreads, wide_ ? 2 : 4) {}

  Kernel build() {
    const char* blocks = mx_       ? "MX 1x32 blocks, E8M0 scales"
                         : square_ ? "128x128 blocks"
                                   : "1x128 blocks";
    b_.set_summary(
        std::string("block-scaled FP8 quantization, one 128x128 tile per thread block (") + blocks +
        ")");
    parameters();
    shared_arrays();
    thread_indices();
    load_tile();
    if (square_) {
      tile_scale();
    } else {
      std::vector<Expr> a = row_amaxes_and_column_partials();
      if (k_.rowwise) mx_ ? mx_row_scales(a) : row_scales(a);
    }
    if (k_.rowwise) row_data();
    if (k_.columnwise) {
      if (!square_) mx_ ? mx_column_scales() : column_scales();
      column_data();
    }
    return b_.finish();
  }

 private:
  // -- Set-up: parameters, shared memory, who this thread is.

  void parameters() {
    const Type in = wide_ && !dact_ ? kF32 : kU16;  // bf16/fp16 as their bits
    const Type scale = mx_ ? kU8 : kF32;
    x_ = b_.param("x", in.pointer_to(Space::global, true));
    row_out_ = b_.param("row_out", kU8.pointer_to(Space::global));
    row_scales_ = b_.param("row_scales", scale.pointer_to(Space::global));
    col_out_ = b_.param("col_out", kU8.pointer_to(Space::global));
    col_scales_ = b_.param("col_scales", scale.pointer_to(Space::global));
    rows_ = b_.param("rows", kI32);
    cols_ = b_.param("cols", kI32);
    if (dact_) pre_ = b_.param("pre", in.pointer_to(Space::global, true));
  }

  void shared_arrays() {
    if (k_.columnwise) {
      b_.comment(
          "columnwise FP8 as [column][row / 4] words, skewed; before that, the partial column "
          "amaxes as [pass * 8 + warp][column]");
      staged_ = b_.shared("staged", kU32, 128 * 33);
    }
    // The multipliers: rows MX [segment][row] (padded), else [row]; columns
    // MX [32-row block][column], else [column].
    if (k_.rowwise && !square_) row_mult_ = b_.shared("row_mult", kF32, 4 * 132);
    if (k_.columnwise && !square_) col_mult_ = b_.shared("col_mult", kF32, 4 * 128);
    if (square_) warp_amax_ = b_.shared("warp_amax", kU32, 8);
  }

  void thread_indices() {
    t_ = b_.let("t", special(Special::tid_x));
    lane_ = b_.let("lane", t_ & 31);
    warp_ = b_.let("warp", t_ >> 5);
    g_ = b_.let("g", t_ & 15);  // columns 8g .. 8g + 7
    q_ = b_.let("q", t_ >> 4);  // rows 64p + 4q + i
    bx_ = b_.let("bx", special(Special::ctaid_x));
    by_ = b_.let("by", special(Special::ctaid_y));
    r0_ = b_.let("r0", by_ * 128);
    c0_ = b_.let("c0", bx_ * 128);
    b_.comment(
        "16-byte loads and 8-byte row stores need cols % 8 == 0, 4-byte column stores "
        "rows % 4 == 0, and the pointers aligned accordingly");
    Expr in_aligned = aligned(x_, 16);
    if (dact_) in_aligned = in_aligned && aligned(pre_, 16);
    wide_in_ = b_.let("wide_in", (cols_ & 7) == 0 && in_aligned);
    Expr fast = rows_ - r0_ >= 128 && cols_ - c0_ >= 128 && wide_in_;
    if (k_.rowwise) {
      wide_row_ = b_.let("wide_row", (cols_ & 7) == 0 && aligned(row_out_, 8));
      fast = fast && wide_row_;
    }
    if (k_.columnwise) {
      wide_col_ = b_.let("wide_col", (rows_ & 3) == 0 && aligned(col_out_, 4));
      fast = fast && wide_col_;
    }
    fast_ = b_.let("fast", fast);
  }

  static Expr u64(std::int64_t v) { return constant(kU64, v); }

  // Whether a row or column of the tile (0 .. 127) is in the tensor, tested
  // as r0 + row < rows (no overflow: tiles start below 2^31 - 128) rather
  // than against a tile extent min(128, rows - r0) kept from the start: one
  // value fewer live across the loads and amaxes, which ptxas spilled in the
  // 128-register fp16 dSiLU kernel.
  Expr in_rows(Expr row) const { return r0_ + row < rows_; }
  Expr in_cols(Expr col) const { return c0_ + col < cols_; }

  // Row k of this thread's 8, within the tile: 64 (k / 4) + 4q + k % 4.
  Expr tile_row(int k) const { return 4 * q_ + (64 * (k >> 2) + (k & 3)); }

  // -- Loads: raw_[k] holds row k's 8 elements as loaded (16-bit: one u32x4
  // of pairs; fp32 and dact: two f32x4).

  void load_tile() {
    for (int k = 0; k < 8; ++k) {
      raw_.emplace_back();
      for (int h = 0; h < (wide_ ? 2 : 1); ++h)
        raw_.back().push_back(b_.local("raw", wide_ ? kF32x4 : kU32x4));
    }
    b_.if_(
        fast_,
        [&] {
          for (int k = 0; k < 8; ++k) {
            Expr offset =
                b_.let("offset", wide(r0_ + tile_row(k)) * wide(cols_) + wide(c0_ + 8 * g_));
            assign_row(k, load_segment(offset));
          }
        },
        [&] {
          for (int k = 0; k < 8; ++k) load_checked(k);
        });
  }

  void assign_row(int k, const std::vector<Expr>& values) {
    for (std::size_t h = 0; h < values.size(); ++h) b_.assign(raw_[k][h], values[h]);
  }

  // Eight elements from `offset` (16-byte aligned), as raw_ keeps them.
  std::vector<Expr> load_segment(Expr offset) {
    if (dact_) return dz_segment(offset);
    if (!wide_) return {load(reinterpret(x_ + offset, kU32x4))};
    Expr p = b_.let("p", reinterpret(x_ + offset, kF32x4));
    return {load(p), load(p + 1)};
  }

  // The two floats of a word of two 16-bit elements (lo, hi).
  std::vector<Expr> unpack_pair(Expr w) const { return word_values(k_.input, std::move(w)); }

  // dy * act'(z), rounded as the backward epilogue rounds it: a multiply of
  // its own, never fused with act''s arithmetic.
  Expr dz(Expr dy, Expr z) { return dy * activation_grad_ir(b_, k_.dact, z); }

  std::vector<Expr> dz_segment(Expr offset) {
    Expr d = b_.let("dy", load(reinterpret(x_ + offset, kU32x4)));
    Expr z = b_.let("z", load(reinterpret(pre_ + offset, kU32x4)));
    std::vector<Expr> v;
    for (int w = 0; w < 4; ++w) {
      const std::vector<Expr> dy = unpack_pair(lane(d, w)), zz = unpack_pair(lane(z, w));
      for (int h = 0; h < 2; ++h) v.push_back(b_.let("dz", dz(dy[h], zz[h])));
    }
    return {make_vector({v[0], v[1], v[2], v[3]}), make_vector({v[4], v[5], v[6], v[7]})};
  }

  std::vector<Expr> zero_segment() const {
    if (!wide_) return {make_vector({u32(0), u32(0), u32(0), u32(0)})};
    Expr z = make_vector({f32(0.0f), f32(0.0f), f32(0.0f), f32(0.0f)});
    return {z, z};
  }

  // Row k bounds-checked: the elements at c + j < cols of a row < rows, +0
  // for the rest; whole segments of 8 wide, the others element by element.
  void load_checked(int k) {
    Expr r = b_.let("r", r0_ + tile_row(k));
    Expr c = b_.let("c", c0_ + 8 * g_);
    assign_row(k, zero_segment());
    b_.if_(r < rows_ && c < cols_, [&] {
      Expr offset = b_.let("offset", wide(r) * wide(cols_) + wide(c));
      b_.if_(
          wide_in_, [&] { assign_row(k, load_segment(offset)); },
          [&] { assign_row(k, load_elements(offset, c)); });
    });
  }

  std::vector<Expr> load_elements(Expr offset, Expr c) {
    if (!wide_) {
      std::vector<Var> h;
      for (int w = 0; w < 4; ++w) h.push_back(b_.local("h", u32(0)));
      for (int j = 0; j < 8; ++j)
        b_.if_(c + j < cols_, [&] {
          Expr e = convert(load(x_ + (offset + i64(j))), kU32);
          b_.assign(h[j >> 1], Expr(h[j >> 1]) | (e << u32(16 * (j & 1))));
        });
      return {make_vector({h[0], h[1], h[2], h[3]})};
    }
    std::vector<Var> e;
    for (int j = 0; j < 8; ++j) e.push_back(b_.local("e", f32(0.0f)));
    for (int j = 0; j < 8; ++j)
      b_.if_(c + j < cols_, [&] {
        Expr at = offset + i64(j);
        b_.assign(e[j], dact_ ? dz(element_value(k_.input, load(x_ + at)),
                                   element_value(k_.input, load(pre_ + at)))
                              : load(x_ + at));
      });
    return {make_vector({e[0], e[1], e[2], e[3]}), make_vector({e[4], e[5], e[6], e[7]})};
  }

  // -- Amaxes on the loaded words. A max of |x| as bits is the max of |x|
  // (every NaN sorts above Inf), also on 16-bit halves, which max.u16x2
  // compares two at a time.

  // Row k's magnitude words: 8 (one element each) or 4 (two).
  std::vector<Expr> magnitudes(int k) {
    std::vector<Expr> m;
    if (!wide_) {
      for (int w = 0; w < 4; ++w) m.push_back(b_.let("mag", lane(raw_[k][0], w) & u32(0x7FFF7FFF)));
    } else {
      for (int j = 0; j < 8; ++j)
        m.push_back(b_.let("mag", bitcast(lane(raw_[k][j >> 2], j & 3), kU32) & u32(0x7FFFFFFF)));
    }
    return m;
  }

  Expr max2(Expr a, Expr b) const {
    return wide_ ? max(std::move(a), std::move(b))
                 : intrinsic(Op::max_u16x2, {std::move(a), std::move(b)});
  }

  // A magnitude word's elements as |x| float bits (one or two).
  std::vector<Expr> widen(Expr m) const {
    if (wide_) return {m};
    if (k_.input == ElemType::bf16) return {m << u32(16), m & u32(0xFFFF0000)};
    std::vector<Expr> e;
    for (Expr f : unpack_pair(m)) e.push_back(bitcast(f, kU32));  // magnitudes: positive floats
    return e;
  }

  // The larger |x| of a magnitude word's elements, as float bits. fp16: the
  // larger half converted, one cvt instead of two (the conversion keeps the
  // order of magnitudes, and a NaN half, the largest, stays NaN).
  Expr word_amax(Expr m) const {
    if (wide_) return m;
    if (k_.input == ElemType::bf16) return max(m << u32(16), m & u32(0xFFFF0000));
    Expr half = max(m & u32(0xFFFF), m >> u32(16));
    return bitcast(intrinsic(Op::f16_to_f32, {convert(half, kU16)}), kU32);
  }

  // Exchange half of the 2n values a lane holds with the lane `bit` away and
  // keep the maxima: the lane with the bit set keeps a[n .. 2n), the other
  // a[0 .. n), both now in a[0 .. n). One shuffle per kept value. With
  // `packed`, the values are magnitude words (max2).
  void fold(std::vector<Expr>& a, int n, int bit, bool packed = false) {
    Expr upper = b_.let("upper", (lane_ & bit) != 0);
    for (int k = 0; k < n; ++k) {
      Expr keep = select(upper, a[k + n], a[k]), give = select(upper, a[k], a[k + n]);
      Expr other = intrinsic(Op::shfl_xor, {give, i32(bit)});
      a[k] = b_.let("folded", packed ? max2(keep, other) : max(keep, other));
    }
    a.resize(n);
  }

  // a[4p + i]: the amax of row 64p + 4q + i over this lane's 8 columns; with
  // columnwise, the partial column amaxes of each pass into staged_.
  std::vector<Expr> row_amaxes_and_column_partials() {
    std::vector<Expr> a(8);
    for (int p = 0; p < 2; ++p) {
      std::vector<Expr> col;  // this lane's 4 rows of the pass
      for (int i = 0; i < 4; ++i) {
        const std::vector<Expr> w = magnitudes(4 * p + i);
        if (k_.columnwise && i == 0) col = w;
        Expr m = w[0];
        for (std::size_t j = 0; j < w.size(); ++j) {
          if (j > 0) m = b_.let("m", max2(m, w[j]));
          if (k_.columnwise && i > 0) col[j] = b_.let("col", max2(col[j], w[j]));
        }
        a[4 * p + i] = b_.let("a", word_amax(m));
      }
      if (k_.columnwise) column_partials(p, col);
    }
    return a;
  }

  // Lanes t and t ^ 16 together hold 8 rows of pass p (64p + 8 * warp ..)
  // of columns 8g .. 8g + 7; after the fold this lane has 4 of those columns
  // (4h .. 4h + 3, h = lane / 16), stored as one 16-byte word.
  void column_partials(int p, std::vector<Expr> col) {
    fold(col, static_cast<int>(col.size()) / 2, 16, true);
    std::vector<Expr> e;
    for (const Expr& m : col)
      for (const Expr& x : widen(m)) e.push_back(x);
    b_.store(reinterpret(staged_ + ((8 * p + warp_) * 128 + 8 * g_ + 4 * (lane_ >> 4)), kU32x4),
             make_vector(e));
  }

  // 128x128: one scale for the tile; every thread reduces the 8 warp maxima
  // and computes it.
  void tile_scale() {
    std::vector<Expr> mag = magnitudes(0);
    for (int k = 1; k < 8; ++k) {
      const std::vector<Expr> w = magnitudes(k);
      for (std::size_t j = 0; j < w.size(); ++j) mag[j] = b_.let("tile_mag", max2(mag[j], w[j]));
    }
    Expr m = word_amax(mag[0]);
    for (std::size_t j = 1; j < mag.size(); ++j) m = b_.let("m", max(m, word_amax(mag[j])));
    for (int o = 16; o > 0; o >>= 1) m = b_.let("m", max(m, intrinsic(Op::shfl_xor, {m, i32(o)})));
    b_.if_(lane_ == 0, [&] { b_.store(warp_amax_ + warp_, m); });
    b_.sync_threads();
    for (int w = 0; w < 8; ++w) m = b_.let("m", max(m, load(warp_amax_ + w)));
    tile_scale_ = block_scale(b_, m, fp8_max_, k_.pow2);
    b_.if_(t_ == 0, [&] {
      Expr inverse = b_.let("inverse", f32(1.0f) / tile_scale_);
      Expr row_blocks = (rows_ + 127) / 128, col_blocks = (cols_ + 127) / 128;
      if (k_.rowwise) b_.store(row_scales_ + (by_ * col_blocks + bx_), inverse);
      if (k_.columnwise) b_.store(col_scales_ + (bx_ * row_blocks + by_), inverse);
    });
  }

  // -- Rowwise scales: into row_mult_ (read back by the same warp) and out.

  // Over the 16 lanes of a row (lane bits 0 to 3): lanes 2m and 2m + 1 end
  // with row m of the 8.
  void row_scales(std::vector<Expr> a) {
    fold(a, 4, 8);
    fold(a, 2, 4);
    fold(a, 1, 2);
    Expr amax = b_.let("row_amax", max(a[0], intrinsic(Op::shfl_xor, {a[0], i32(1)})));
    Expr s = block_scale(b_, amax, fp8_max_, k_.pow2);
    b_.if_((lane_ & 1) == 0, [&] {
      Expr k = b_.let("k", g_ >> 1);
      Expr row = b_.let("row", 64 * (k >> 2) + 4 * q_ + (k & 3));
      b_.store(row_mult_ + row, s);
      b_.if_(in_rows(row), [&] {
        Expr at = k_.k_block_major ? wide(bx_) * wide(rows_) + wide(r0_ + row)
                                   : wide(r0_ + row) * wide((cols_ + 127) / 128) + wide(bx_);
        b_.store(row_scales_ + at, f32(1.0f) / s);
      });
    });
    b_.sync_warp();  // a row's multipliers are written and read by its own warp
  }

  // MX, over the 4 lanes of a 32-column segment (lane bits 0 and 1): this
  // lane keeps rows 4 * b1 + 2 * b0 + {0, 1} of its 8.
  void mx_row_scales(std::vector<Expr> a) {
    fold(a, 4, 2);
    fold(a, 2, 1);
    Expr seg = b_.let("seg", g_ >> 2);
    for (int h = 0; h < 2; ++h) {
      Expr k = b_.let("k", 4 * ((lane_ >> 1) & 1) + 2 * (lane_ & 1) + h);
      Expr row = b_.let("row", 64 * (k >> 2) + 4 * q_ + (k & 3));
      Expr code = mx_code(b_, a[h], numerics::mx_element_emax(k_.format));
      b_.store(row_mult_ + (seg * 132 + row), mx_multiplier(code));
      b_.if_(in_rows(row) && in_cols(32 * seg), [&] {
        Expr at = wide(r0_ + row) * wide((cols_ + 31) / 32) + wide(c0_ / 32 + seg);
        b_.store(row_scales_ + at, convert(code, kU8));
      });
    }
    b_.sync_warp();
  }

  // -- Rowwise data.

  // The 8 elements of a row segment as floats, as loaded.
  std::vector<Expr> decode(int k) const {
    std::vector<Expr> v;
    if (wide_) {
      for (int j = 0; j < 8; ++j) v.push_back(lane(raw_[k][j >> 2], j & 3));
    } else {
      for (int w = 0; w < 4; ++w)
        for (Expr f : unpack_pair(lane(raw_[k][0], w))) v.push_back(f);
    }
    return v;
  }

  // Four FP8 bytes of the products a[j] * m[j], a[0] lowest.
  Expr pack4(const std::vector<Expr>& a, const std::vector<Expr>& m) const {
    return fp8_pair(k_.format, a[0] * m[0], a[1] * m[1]) |
           (fp8_pair(k_.format, a[2] * m[2], a[3] * m[3]) << u32(16));
  }

  // The multipliers of rows 4q .. 4q + 3 of pass p (one 16-byte shared load).
  Expr row_multipliers(int p) {
    Expr at = 64 * p + 4 * q_;
    if (mx_) at = (g_ >> 2) * 132 + at;
    return b_.let("row_m", load(reinterpret(row_mult_ + at, kF32x4)));
  }

  // Row k's 8 FP8 bytes (u32x2), with its multiplier.
  Expr row_bytes(int k, Expr m) {
    const std::vector<Expr> v = decode(k);
    const std::vector<Expr> ms(4, m);
    return b_.let("packed", make_vector({pack4({v[0], v[1], v[2], v[3]}, ms),
                                         pack4({v[4], v[5], v[6], v[7]}, ms)}));
  }

  Expr row_multiplier(int k, Expr& m4) {
    if (square_) return tile_scale_;
    if ((k & 3) == 0) m4 = row_multipliers(k >> 2);
    return lane(m4, k & 3);
  }

  // Whole tiles store from a pass of their own: with the bounds checks in
  // the same code, the compiler computes all 8 rows before the first store
  // and needs 40 more registers. The edge path packs a row inside its bounds
  // check, so the two paths do not begin with the same instructions: LLVM's
  // code generation hoists a common start of both into the block before
  // them, which for bf16 was the decode of all 64 elements (spills).
  void row_data() {
    Expr base =
        b_.let("row_base", row_out_ + (wide(r0_ + 4 * q_) * wide(cols_) + wide(c0_ + 8 * g_)));
    const auto out = [&](int k) { return base + i64(64 * (k >> 2) + (k & 3)) * wide(cols_); };
    b_.if_(
        fast_,
        [&] {
          Expr m4;
          for (int k = 0; k < 8; ++k) {
            Expr bytes = row_bytes(k, row_multiplier(k, m4));
            b_.store(reinterpret(out(k), kU32x2), bytes, true);
          }
        },
        [&] {
          Expr m4;
          for (int k = 0; k < 8; ++k) {
            Expr m = row_multiplier(k, m4);
            Expr p = b_.let("out", out(k));
            b_.if_(in_rows(tile_row(k)) && in_cols(8 * g_), [&] {
              Expr bytes = row_bytes(k, m);
              b_.if_(
                  wide_row_, [&] { b_.store(reinterpret(p, kU32x2), bytes); },
                  [&] {
                    for (int j = 0; j < 8; ++j)
                      b_.if_(in_cols(8 * g_ + j), [&] {
                        b_.store(p + i64(j), convert(lane(bytes, j >> 2) >> u32(8 * (j & 3)), kU8));
                      });
                  });
            });
          }
        });
  }

  // -- Columnwise scales: from the partial maxima in staged_ into col_mult_ and out.

  // 1x128: thread t < 128 reduces the 16 partial maxima of column t.
  void column_scales() {
    b_.sync_threads();  // the partial column amaxes are in
    b_.if_(t_ < 128, [&] {
      Expr m = load(staged_ + t_);
      for (int i = 1; i < 16; ++i) m = b_.let("m", max(m, load(staged_ + (i * 128 + t_))));
      Expr s = block_scale(b_, m, fp8_max_, k_.pow2);
      b_.store(col_mult_ + t_, s);
      b_.if_(in_cols(t_), [&] {
        Expr at = k_.k_block_major ? wide(by_) * wide(cols_) + wide(c0_ + t_)
                                   : wide(c0_ + t_) * wide((rows_ + 127) / 128) + wide(by_);
        b_.store(col_scales_ + at, f32(1.0f) / s);
      });
    });
    b_.sync_threads();  // the multipliers are in; the partial maxima are dead
  }

  // MX: thread t takes the two 32-row blocks of column t % 128 in pass t / 128,
  // 4 partial maxima each.
  void mx_column_scales() {
    b_.sync_threads();
    Expr c = b_.let("c", t_ & 127), p = b_.let("p", t_ >> 7);
    for (int h = 0; h < 2; ++h) {
      Expr m = load(staged_ + ((8 * p + 4 * h) * 128 + c));
      for (int w = 1; w < 4; ++w)
        m = b_.let("m", max(m, load(staged_ + ((8 * p + (4 * h + w)) * 128 + c))));
      Expr block = b_.let("block", 2 * p + h);
      Expr code = mx_code(b_, m, numerics::mx_element_emax(k_.format));
      b_.store(col_mult_ + (block * 128 + c), mx_multiplier(code));
      b_.if_(in_cols(c) && in_rows(32 * block), [&] {
        Expr at = wide(c0_ + c) * wide((rows_ + 31) / 32) + wide(r0_ / 32 + block);
        b_.store(col_scales_ + at, convert(code, kU8));
      });
    }
    b_.sync_threads();
  }

  // -- Columnwise data.

  // The words decoded again, written unlike decode() (a byte permute, not a
  // shift) so that the compiler recomputes the floats instead of keeping 64
  // of them alive across the barriers since the rowwise pass (fp16: the
  // halves swapped, then converted).
  std::vector<Expr> decode_again(int k) const {
    if (wide_) return decode(k);
    std::vector<Expr> v;
    for (int w = 0; w < 4; ++w) {
      Expr word = lane(raw_[k][0], w);
      if (k_.input == ElemType::bf16) {
        v.push_back(bitcast(intrinsic(Op::byte_perm, {word, u32(0), u32(0x1044)}), kF32));
        v.push_back(bitcast(intrinsic(Op::byte_perm, {word, u32(0), u32(0x3244)}), kF32));
      } else {
        Expr swapped = intrinsic(Op::byte_perm, {word, u32(0), u32(0x1032)});
        v.push_back(intrinsic(Op::f16_to_f32, {convert(swapped >> u32(16), kU16)}));
        v.push_back(intrinsic(Op::f16_to_f32, {convert(swapped, kU16)}));
      }
    }
    return v;
  }

  // This thread's 8 column multipliers in pass p.
  std::vector<Expr> column_multipliers(int p) {
    if (square_) return std::vector<Expr>(8, tile_scale_);
    Expr at = 8 * g_;
    if (mx_) at = (2 * p + (q_ >> 3)) * 128 + at;
    Expr m0 = b_.let("col_m", load(reinterpret(col_mult_ + at, kF32x4)));
    Expr m1 = b_.let("col_m", load(reinterpret(col_mult_ + (at + 4), kF32x4)));
    std::vector<Expr> m;
    for (int j = 0; j < 8; ++j) m.push_back(lane(j < 4 ? m0 : m1, j & 3));
    return m;
  }

  // Columns 8g + j, rows 4 at a time as words, into the skewed staging: the
  // word's slot is XORed with the column's 32-column group, so a warp's 32
  // stores land on (nearly) distinct banks; the readers undo it.
  void stage_columns() {
    for (int p = 0; p < 2; ++p) {
      const std::vector<Expr> m = column_multipliers(p);
      std::vector<std::vector<Expr>> v;
      for (int i = 0; i < 4; ++i) v.push_back(decode_again(4 * p + i));
      Expr slot = b_.let("slot", (16 * p + q_) ^ ((g_ >> 2) & 3));
      for (int j = 0; j < 8; ++j) {
        Expr word = pack4({v[0][j], v[1][j], v[2][j], v[3][j]}, {m[j], m[j], m[j], m[j]});
        b_.store(staged_ + ((8 * g_ + j) * 33 + slot), word);
      }
    }
  }

  // Each warp writes 16 columns, one 128-byte segment (lane: rows 4 * lane
  // .. 4 * lane + 3) per store instruction.
  void column_data() {
    stage_columns();
    b_.sync_threads();
    b_.for_(
        "cc", i32(0), i32(16), i32(1),
        [&](Expr cc) {
          Expr col = b_.let("col", 16 * warp_ + cc);
          Expr word = b_.let("word", load(staged_ + (col * 33 + (lane_ ^ ((col >> 5) & 3)))));
          Expr out =
              b_.let("out", col_out_ + (wide(c0_ + col) * wide(rows_) + wide(r0_ + 4 * lane_)));
          b_.if_(
              fast_, [&] { b_.store(reinterpret(out, kU32), word, true); },
              [&] {
                b_.if_(in_cols(col) && in_rows(4 * lane_), [&] {
                  b_.if_(
                      wide_col_, [&] { b_.store(reinterpret(out, kU32), word); },
                      [&] {
                        for (int j = 0; j < 4; ++j)
                          b_.if_(in_rows(4 * lane_ + j),
                                 [&] { b_.store(out + i64(j), convert(word >> u32(8 * j), kU8)); });
                      });
                });
              });
        },
        4);
  }

  const BlockQuantizeKernel& k_;
  const bool dact_, wide_, mx_, square_;
  const float fp8_max_;
  Builder b_;
  Expr x_, pre_, row_out_, row_scales_, col_out_, col_scales_, rows_, cols_;
  Expr staged_, row_mult_, col_mult_, warp_amax_;
  Expr t_, lane_, warp_, g_, q_, bx_, by_, r0_, c0_;
  Expr wide_in_, wide_row_, wide_col_, fast_;
  std::vector<std::vector<Var>> raw_;
  Expr tile_scale_;  // 128x128: the tile's multiplier
};

}  // namespace

std::string BlockQuantizeKernel::name() const {
  std::string n = "block_quantize_" + std::string(to_string(input)) + "_" +
                  std::string(to_string(format)) + "_" + scaling_tag(scaling);
  n += rowwise ? "_r" : "";
  n += columnwise ? "_c" : "";
  if (pow2) n += "_pow2";
  if (k_block_major) n += "_kbm";
  if (dact != Activation::none) n += "_d" + std::string(to_string(dact));
  return n;
}

ir::Kernel build_ir(const BlockQuantizeKernel& k) {
  require_fp8(k.format, "block quantize kernel format");
  if (k.scaling != Scaling::block_1x128 && k.scaling != Scaling::block_128x128 &&
      k.scaling != Scaling::mx_1x32)
    throw std::invalid_argument("block quantize: not a block scaling: " +
                                std::string(to_string(k.scaling)));
  if (k.k_block_major && k.scaling != Scaling::block_1x128)
    throw std::invalid_argument("block quantize: K-block-major scales are for block_1x128, not " +
                                std::string(to_string(k.scaling)));
  if (k.dact != Activation::none && k.input != ElemType::bf16 && k.input != ElemType::fp16)
    throw std::invalid_argument("block quantize: dact takes a bf16 or fp16 input, not " +
                                std::string(to_string(k.input)));
  if (k.input != ElemType::bf16 && k.input != ElemType::fp16 && k.input != ElemType::fp32)
    throw std::invalid_argument("block quantize: input " + std::string(to_string(k.input)) +
                                " (bf16, fp16 or fp32)");
  return BlockQuantizeBuilder(k).build();
}

KernelSource emit_cuda(const BlockQuantizeKernel& k) {
  auto ir = std::make_shared<const ir::Kernel>(build_ir(k));
  return {k.name(), k.name(), cuda::print(*ir), {}, SourceLanguage::cuda, ir};
}

}  // namespace fp8c
