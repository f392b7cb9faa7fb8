// TransposeKernel as kernel IR (both backends print or compile this).
//
// Bytes, fast path (a whole 128x128 tile, rows and cols multiples of 16):
// thread t loads 16 bytes from each of 4 adjacent rows (16-byte loads, 8
// threads per 128-byte row segment), turns the 4x16 bytes into 16 column
// words of 4 rows each with byte permutes, and stages them in shared memory
// as [128 columns][32 words]. Each output column is then 128 contiguous
// bytes, which 8 threads store as 16-byte vectors. The 16-byte chunks of a
// column row are XOR-swizzled by the column's 16-column group, so both the
// word writes and the vector reads hit 32 distinct banks.
// Other tiles (edges, unaligned shapes) go through a byte tile in shared
// memory: coalesced byte loads along rows, coalesced byte stores along
// columns. Correct for any shape, a few times slower.
//
// Words (block scales, a few MB at most): the textbook 32x32 tile through
// shared memory padded to 33 columns, so both the row reads and the column
// writes are coalesced and conflict-free; a batch of matrices (one per rank
// segment) in one launch, one per blockIdx.z.
#include <memory>
#include <stdexcept>
#include <string>

#include "codegen/backends/cuda/cuda_printer.hpp"
#include "codegen/ir/builder.hpp"
#include "codegen/kernels/transpose.hpp"

namespace fp8c {
namespace {

using namespace ir;

Kernel word_transpose(const TransposeKernel& k) {
  Builder b(k.name(), kTransposeThreads);
  b.set_summary("transpose of a batch of [rows, cols] u32 matrices (32x32 tiles)");
  Expr in = b.param("in", kU32.pointer_to(Space::global, true));
  Expr out = b.param("out", kU32.pointer_to(Space::global));
  Expr rows = b.param("rows", kI32);
  Expr cols = b.param("cols", kI32);
  Expr tile = b.shared("tile", kU32, 32 * 33);
  b.comment("blockIdx.z: one matrix of a batch stored back to back (rank segments)");
  Expr batch = b.let("batch", wide(special(Special::ctaid_z)) * wide(rows) * wide(cols));
  Expr src = b.let("src", in + batch);
  Expr dst = b.let("dst", out + batch);
  Expr t = special(Special::tid_x);
  Expr x = b.let("x", t & 31), y = b.let("y", t >> 5);
  Expr r0 = b.let("r0", special(Special::ctaid_y) * 32);
  Expr c0 = b.let("c0", special(Special::ctaid_x) * 32);
  // Rows y, y + 8, y + 16, y + 24: a loop of a constant count, so both
  // backends unroll it fully (from y to 32 the count is unknown to them).
  constexpr int kWarps = kTransposeThreads / 32;
  b.for_(
      "j", i32(0), i32(32 / kWarps), i32(1),
      [&](Expr j) {
        Expr i = b.let("i", y + j * kWarps);
        b.if_(r0 + i < rows && c0 + x < cols, [&] {
          b.store(tile + (i * 33 + x), load(src + (wide(r0 + i) * wide(cols) + wide(c0 + x))));
        });
      },
      1);
  b.sync_threads();
  b.for_(
      "j", i32(0), i32(32 / kWarps), i32(1),
      [&](Expr j) {
        Expr i = b.let("i", y + j * kWarps);
        b.if_(c0 + i < cols && r0 + x < rows, [&] {
          b.store(dst + (wide(c0 + i) * wide(rows) + wide(r0 + x)), load(tile + (x * 33 + i)));
        });
      },
      1);
  return b.finish();
}

// The four bytes b of x0..x3 (byte b of each word) as one word, x0 lowest:
// a 4x4 byte transpose in 8 permutes.
std::vector<Expr> transpose4x4(Builder& b, Expr x0, Expr x1, Expr x2, Expr x3) {
  Expr lo01 = b.let("lo01", intrinsic(Op::byte_perm, {x0, x1, u32(0x5140)}));
  Expr hi01 = b.let("hi01", intrinsic(Op::byte_perm, {x0, x1, u32(0x7362)}));
  Expr lo23 = b.let("lo23", intrinsic(Op::byte_perm, {x2, x3, u32(0x5140)}));
  Expr hi23 = b.let("hi23", intrinsic(Op::byte_perm, {x2, x3, u32(0x7362)}));
  return {intrinsic(Op::byte_perm, {lo01, lo23, u32(0x5410)}),
          intrinsic(Op::byte_perm, {lo01, lo23, u32(0x7632)}),
          intrinsic(Op::byte_perm, {hi01, hi23, u32(0x5410)}),
          intrinsic(Op::byte_perm, {hi01, hi23, u32(0x7632)})};
}

Kernel byte_transpose(const TransposeKernel& k) {
  Builder b(k.name(), kTransposeThreads);
  b.set_summary("transpose of a [rows, cols] byte matrix (128x128 tiles)");
  Expr in = b.param("in", kU8.pointer_to(Space::global, true));
  Expr out = b.param("out", kU8.pointer_to(Space::global));
  Expr rows = b.param("rows", kI32);
  Expr cols = b.param("cols", kI32);
  b.comment("fast path: [128 columns][32 words]; edge path: [128 rows][132 bytes]");
  Expr staged = b.shared("staged", kU32, 128 * 33);
  Expr t = b.let("t", special(Special::tid_x));
  Expr r0 = b.let("r0", special(Special::ctaid_y) * 128);
  Expr c0 = b.let("c0", special(Special::ctaid_x) * 128);
  Expr fast =
      b.let("fast", r0 + 128 <= rows && c0 + 128 <= cols && (rows & 15) == 0 && (cols & 15) == 0);
  b.if_(fast, [&] {
    Expr g = b.let("g", t & 7), q = b.let("q", t >> 3);  // 16-column group, 4-row group
    std::vector<Expr> v;
    for (int i = 0; i < 4; ++i)
      v.push_back(b.let(
          "v",
          load(reinterpret(in + (wide(r0 + 4 * q + i) * wide(cols) + wide(c0 + 16 * g)), kU32x4))));
    b.comment("column c's row word q lives in 16-byte chunk (q / 4) ^ (c / 16)");
    Expr slot = b.let("slot", (((q >> 2) ^ g) << 2) | (q & 3));
    for (int w = 0; w < 4; ++w) {
      const std::vector<Expr> col =
          transpose4x4(b, lane(v[0], w), lane(v[1], w), lane(v[2], w), lane(v[3], w));
      for (int j = 0; j < 4; ++j) b.store(staged + ((16 * g + 4 * w + j) * 32 + slot), col[j]);
    }
    b.sync_threads();
    Expr chunk = b.let("chunk", t & 7);  // 16 rows of the output column
    for (int i = 0; i < 4; ++i) {
      Expr c = b.let("c", (t >> 3) + 32 * i);
      Expr word =
          b.let("word", load(reinterpret(staged + (c * 32 + ((chunk ^ (c >> 4)) << 2)), kU32x4)));
      b.store(reinterpret(out + (wide(c0 + c) * wide(rows) + wide(r0 + 16 * chunk)), kU32x4), word);
    }
    b.return_();
  });
  Expr tile = b.let("tile", reinterpret(staged, kU8));
  Expr tile_rows = b.let("tile_rows", min(i32(128), rows - r0));
  Expr tile_cols = b.let("tile_cols", min(i32(128), cols - c0));
  b.for_("i", t, i32(128 * 128), i32(kTransposeThreads), [&](Expr i) {
    Expr r = b.let("r", i >> 7), c = b.let("c", i & 127);
    b.if_(r < tile_rows && c < tile_cols, [&] {
      b.store(tile + (r * 132 + c), load(in + (wide(r0 + r) * wide(cols) + wide(c0 + c))));
    });
  });
  b.sync_threads();
  b.for_("i", t, i32(128 * 128), i32(kTransposeThreads), [&](Expr i) {
    Expr c = b.let("c", i >> 7), r = b.let("r", i & 127);
    b.if_(r < tile_rows && c < tile_cols, [&] {
      b.store(out + (wide(c0 + c) * wide(rows) + wide(r0 + r)), load(tile + (r * 132 + c)));
    });
  });
  return b.finish();
}

}  // namespace

ir::Kernel build_ir(const TransposeKernel& k) {
  if (k.element_bytes == 4) return word_transpose(k);
  if (k.element_bytes != 1)
    throw std::invalid_argument("transpose: " + std::to_string(k.element_bytes) +
                                "-byte elements (the kernel moves 1- or 4-byte ones)");
  return byte_transpose(k);
}

KernelSource emit_cuda(const TransposeKernel& k) {
  auto ir = std::make_shared<const ir::Kernel>(build_ir(k));
  return {k.name(), k.name(), cuda::print(*ir), {}, SourceLanguage::cuda, ir};
}

}  // namespace fp8c
