// The kernel IR: its constructors refuse operands that do not fit (naming
// the operation), the builder keeps names unique and statements in their
// blocks, the text form shows a kernel exactly, and the CUDA printer's
// source compiles with NVRTC. Pure functions: no GPU, no LLVM.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "codegen/backends/cuda/cuda_printer.hpp"
#include "codegen/ir/builder.hpp"
#include "codegen/kernels/block_quantize.hpp"
#include "codegen/kernels/transpose.hpp"
#include "runtime/jit.hpp"
#include "tests/ir/every_intrinsic_kernel.hpp"
#include "tests/runtime/compile_check.hpp"

namespace fp8c::ir {
namespace {

// The message of the std::invalid_argument `f` throws, or "" when it throws none.
template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(KernelIr, OperandsOfDifferentTypesAreRefusedByName) {
  EXPECT_EQ(refusal([] { (void)(u32(1) + f32(1.0f)); }), "kernel IR: add of u32 and f32");
  EXPECT_EQ(refusal([] { (void)(i32(1) < u32(2)); }), "kernel IR: lt of i32 and u32");
  EXPECT_TRUE(
      contains(refusal([] { (void)(pred(true) < pred(false)); }), "ordering of predicates"));
  EXPECT_TRUE(contains(refusal([] { (void)(pred(true) + pred(false)); }), "add of predicates"));
  EXPECT_TRUE(contains(refusal([] { (void)constant(kF32, 1); }), "integer constant of type f32"));
  EXPECT_TRUE(contains(refusal([] { (void)Expr().type(); }), "undefined expression"));
  EXPECT_EQ(refusal([] { (void)(u32(1) + u32(2)); }), "");
}

TEST(KernelIr, MemoryOperationsCheckTheirPointers) {
  Builder b("k", 128);
  Expr in = b.param("in", kU32.pointer_to(Space::global, true));
  Expr out = b.param("out", kU32.pointer_to(Space::global));
  // Loads through any pointer; stores only through a writable one, of its pointee type.
  EXPECT_EQ(load(index(in, i32(3))).type(), kU32);
  EXPECT_TRUE(contains(refusal([&] { b.store(in, u32(1)); }), "ir::Builder: store"));
  EXPECT_TRUE(contains(refusal([&] { b.store(out, f32(1)); }), "ir::Builder: store"));
  EXPECT_TRUE(contains(refusal([&] { (void)load(u32(0)); }), "kernel IR"));
  EXPECT_TRUE(contains(refusal([&] { (void)index(out, f32(1)); }), "kernel IR"));
  EXPECT_TRUE(contains(refusal([&] { b.if_(u32(1), [] {}); }), "ir::Builder: if on u32"));
  EXPECT_TRUE(contains(refusal([&] { b.for_("i", i32(0), f32(4), i32(1), [](Expr) {}); }),
                       "ir::Builder: loop i bound of f32"));
  EXPECT_TRUE(contains(refusal([&] { b.param("in", kU32); }), "parameter in twice"));
  EXPECT_TRUE(contains(refusal([&] { b.atomic_max(in, u32(1)); }), "atomic_max"));
  // A pointer's address, as a u64 (alignment tests): of pointers only.
  EXPECT_EQ(address(index(in, i32(1))).type(), kU64);
  EXPECT_TRUE(contains(refusal([&] { (void)address(u32(0)); }), "address of u32"));
}

TEST(KernelIr, NoStatementAfterFinish) {
  Builder b("k", 32);
  b.return_();
  (void)b.finish();
  EXPECT_THROW(b.sync_threads(), std::logic_error);
}

// The whole text form of a small kernel: names made unique, nested blocks
// indented, every field of the kernel shown (what the JIT's key for the LLVM
// backend hashes).
TEST(KernelIr, PrintsEveryPartOfAKernel) {
  Builder b("scale", 128, 2);
  Expr in = b.param("in", kF32.pointer_to(Space::global, true));
  Expr out = b.param("out", kF32.pointer_to(Space::global), false);
  Expr n = b.param("n", kI32);
  Expr tile = b.shared("tile", kF32, 128);
  Var x = b.local("x", f32(0.5f));
  Expr t = b.let("x", special(Special::tid_x));
  b.if_(t < n, [&] {
    b.store(index(tile, t), intrinsic(Op::fma, {load(index(in, t)), x, f32(1.0f)}));
  });
  b.sync_threads();
  b.for_(
      "i", t, n, i32(128), [&](Expr i) { b.store(index(out, i), load(index(tile, t)), true); }, 4);
  const std::string text = print(b.finish());
  EXPECT_EQ(text,
            "kernel scale(in: global const f32* restrict, out: global f32*, n: i32) threads 128 "
            "min_blocks 2\n"
            "  shared tile: f32[128] align 16\n"
            "  var x: f32 = 0x1p-1\n"
            "  var x_1: i32 = tid.x\n"
            "  if lt(x_1, n)\n"
            "    store index(tile, x_1), fma(load(index(in, x_1)), x, 0x1p+0)\n"
            "  sync_threads\n"
            "  for i in [x_1, n) step 128:i32 unrolled by 4\n"
            "    store.cs index(out, i), load(index(tile, x_1))\n")
      << text;
}

TEST(KernelIr, TransposeKernelsCarryTheIrTheirSourceIsPrintedFrom) {
  for (int bytes : {1, 4}) {
    const KernelSource k = emit_cuda(TransposeKernel{bytes});
    ASSERT_NE(k.ir, nullptr) << k.name;
    EXPECT_EQ(k.language, SourceLanguage::cuda);
    EXPECT_EQ(k.ir->name, k.entry);
    EXPECT_EQ(k.source, cuda::print(*k.ir));
    EXPECT_TRUE(contains(k.source, "extern \"C\" __global__")) << k.source;
    EXPECT_FALSE(contains(k.source, "#include")) << k.name << " must be self-contained";
  }
  EXPECT_THROW(build_ir(TransposeKernel{2}), std::invalid_argument);
}

// The block quantize kernels are IR too: same entry and parameters as the
// CUDA text they replaced (the launcher passes 7, or 8 with dact), launch
// bounds of 4 blocks an SM for 16-bit inputs and 2 for fp32 or dact, and
// descriptions the kernel cannot build refused.
TEST(KernelIr, BlockQuantizeKernelsCarryTheIrTheirSourceIsPrintedFrom) {
  BlockQuantizeKernel k;
  k.rowwise = k.columnwise = true;
  for (ElemType input : {ElemType::bf16, ElemType::fp16, ElemType::fp32})
    for (Activation dact : {Activation::none, Activation::gelu}) {
      if (input == ElemType::fp32 && dact != Activation::none) continue;
      k.input = input;
      k.dact = dact;
      const KernelSource s = emit_cuda(k);
      ASSERT_NE(s.ir, nullptr) << s.name;
      EXPECT_EQ(s.ir->name, k.name());
      EXPECT_EQ(s.entry, k.name());
      EXPECT_EQ(s.source, cuda::print(*s.ir));
      EXPECT_EQ(s.ir->max_threads, kBlockQuantizeThreads);
      const bool wide = input == ElemType::fp32 || dact != Activation::none;
      EXPECT_EQ(s.ir->min_blocks, wide ? 2 : 4) << s.name;
      EXPECT_EQ(s.ir->params.size(), dact != Activation::none ? 8u : 7u) << s.name;
      EXPECT_FALSE(contains(s.source, "#include")) << s.name;
    }
  BlockQuantizeKernel bad;
  bad.input = ElemType::fp32;
  bad.dact = Activation::relu;
  EXPECT_TRUE(contains(refusal([&] { (void)build_ir(bad); }), "dact takes a bf16 or fp16"));
  bad = {};
  bad.scaling = Scaling::mx_1x32;
  bad.k_block_major = true;
  EXPECT_TRUE(contains(refusal([&] { (void)build_ir(bad); }), "K-block-major"));
  bad = {};
  bad.scaling = Scaling::per_tensor;
  EXPECT_TRUE(contains(refusal([&] { (void)build_ir(bad); }), "not a block scaling"));
  bad = {};
  bad.input = ElemType::e4m3;
  EXPECT_TRUE(contains(refusal([&] { (void)build_ir(bad); }), "input e4m3"));
}

// The CUDA printer's output of a kernel using each kind of statement and the
// PTX-only operations compiles with NVRTC for sm_90a (no GPU needed).
TEST(KernelIr, CudaPrintOfEveryStatementKindCompiles) {
  Builder b("every_statement", 256);
  Expr in = b.param("in", kF32.pointer_to(Space::global, true));
  Expr out = b.param("out", kU16.pointer_to(Space::global));
  Expr amax = b.param("amax", kU32.pointer_to(Space::global));
  Expr n = b.param("n", kI32);
  Expr tile = b.shared("tile", kF32, 256);
  Expr t = b.let("t", special(Special::tid_x));
  Expr i = b.let("i", special(Special::ctaid_x) * 256 + t);
  Var v = b.local("v", kF32);
  b.comment("every statement kind");
  b.if_(
      i < n, [&] { b.assign(v, load(index(in, i))); }, [&] { b.assign(v, f32(0)); });
  b.store(index(tile, t), v);
  b.sync_threads();
  Var m = b.local("m", bitcast(v, kU32) & u32(0x7fffffff));
  b.for_(
      "s", i32(16), i32(0), i32(-1), [&](Expr) {}, 0);
  b.for_(
      "k", i32(0), i32(5), i32(1),
      [&](Expr k) {
        b.assign(m, max(Expr(m), intrinsic(Op::shfl_xor, {Expr(m), i32(1) << k})));
      },
      1);
  b.sync_warp();
  b.if_((t & 31) == 0, [&] { b.atomic_max(amax, m); });
  b.if_(!(i < n), [&] { b.return_(); });
  Expr packed = intrinsic(Op::pack_e4m3x2, {v, load(index(tile, (t + 1) & 255))});
  b.store(index(out, i), packed, true);
  const KernelSource k{"every_statement", "every_statement", cuda::print(b.finish()), {}};
  const auto dir = fp8c::testing::process_temp_dir("fp8c-ir-print-compile-test");
  std::filesystem::remove_all(dir);
  const runtime::Jit jit("sm_90a", runtime::CubinCache(dir.string()));
  const runtime::CompiledKernel c = jit.compile(k);
  EXPECT_FALSE(c.cubin.empty());
  EXPECT_GT(c.registers, 0);
  EXPECT_EQ(c.spill_stores + c.spill_loads, 0);
  EXPECT_EQ(c.compiler.rfind("nvrtc ", 0), 0u) << c.compiler;
  std::filesystem::remove_all(dir);
}

// Every intrinsic's CUDA print compiles with NVRTC for sm_90a, and each
// PTX-only one is the instruction it names.
TEST(KernelIr, CudaPrintOfEveryIntrinsicCompiles) {
  const Kernel kernel = testing::every_intrinsic_kernel();
  const std::string source = cuda::print(kernel);
  for (const char* instruction :
       {"cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f32", "cvt.rn.f16x2.e4m3x2",
        "cvt.rn.f16x2.e5m2x2", "cvt.rn.bf16x2.f32", "cvt.rn.f16x2.f32", "cvt.rn.bf16.f32",
        "cvt.rn.f16.f32", "cvt.f32.f16", "tanh.approx.f32", "ex2.approx.f32", "div.approx.f32",
        "max.u16x2"})
    EXPECT_TRUE(contains(source, instruction)) << instruction;
  const auto dir = fp8c::testing::process_temp_dir("fp8c-ir-intrinsics-compile-test");
  std::filesystem::remove_all(dir);
  const runtime::Jit jit("sm_90a", runtime::CubinCache(dir.string()));
  const runtime::CompiledKernel c = jit.compile(KernelSource{kernel.name, kernel.name, source, {}});
  EXPECT_FALSE(c.cubin.empty());
  EXPECT_EQ(c.spill_stores + c.spill_loads, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp8c::ir
