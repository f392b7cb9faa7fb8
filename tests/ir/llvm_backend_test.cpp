// The LLVM backend from kernel IR to CUBIN, without a GPU: for every IR
// kernel (the transpose variants and every one the examples' plans launch)
// the LLVM IR passes LLVM's verifier before and after O3, the NVPTX backend
// writes PTX for sm_90a, and nvJitLink assembles it with no spills. The JIT
// keys LLVM-built kernels apart from NVRTC-built ones, caches them, and
// sends the kinds not built as IR to NVRTC. Skipped, saying why, in a build
// without LLVM.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "codegen/backends/llvm/llvm_backend.hpp"
#include "codegen/lower/lowered.hpp"
#include "codegen/plan/planner.hpp"
#include "fp8c/dsl.hpp"
#include "runtime/jit.hpp"
#include "runtime/ptx_compiler.hpp"
#include "tests/ir/every_intrinsic_kernel.hpp"
#include "tests/llvm_module.hpp"
#include "tests/runtime/epilogue_variants.hpp"
#include "tests/runtime/kernel_variants.hpp"
#include "tests/runtime/scratch_cache_test.hpp"
#include "tests/test_paths.hpp"

namespace fp8c {
namespace {

#define REQUIRE_LLVM()                                                                         \
  do {                                                                                         \
    if (!llvm_backend::available())                                                            \
      GTEST_SKIP() << "no LLVM backend in this build: " << llvm_backend::unavailable_reason(); \
  } while (0)

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Every kernel built as IR: the transposes and permutes of every element
// size, scale updates, every epilogue and dequantize variant the GPU tests
// run, block quantize variants, and each IR kernel of each example's plan (by
// name, once).
std::vector<KernelSource> ir_kernels() {
  std::vector<KernelSource> all = {emit_cuda(TransposeKernel{1}), emit_cuda(TransposeKernel{4}),
                                   emit_cuda(PermuteKernel{1}), emit_cuda(PermuteKernel{2}),
                                   emit_cuda(PermuteKernel{4})};
  // The scale update with its guard and strides, and with the most-recent rule.
  ScaleUpdateKernel guarded{
      {ElemType::e4m3, ElemType::e4m3, ElemType::e5m2}, 1024, 3, AmaxAlgo::max};
  guarded.scale_stride = 4;
  guarded.guard = 3;
  all.push_back(emit_cuda(guarded));
  all.push_back(emit_cuda(ScaleUpdateKernel{{ElemType::e5m2}, 300, -2, AmaxAlgo::most_recent}));
  for (const EpilogueKernel& k : testing::epilogue_variants()) all.push_back(emit_cuda(k));
  for (const auto& k : testing::block_quantize_compile_variants()) all.push_back(emit_cuda(k));
  // Every format, scaling, output type and orientation; amax with each scaling.
  for (const DequantizeKernel& k : testing::dequantize_variants()) all.push_back(emit_cuda(k));
  std::set<std::string> names;
  for (const auto& k : all) names.insert(k.name);
  for (const auto& entry : std::filesystem::directory_iterator(testing::examples_dir())) {
    if (entry.path().extension() != ".fp8") continue;
    const Spec spec = load_spec(entry.path().string());
    const LoweredPlan lowered = lower_plan(spec, plan_spec(spec, {std::nullopt, 1024}));
    for (const auto& p : lowered.kernels) {
      KernelSource k = emit_cuda(p.kernel);
      if (k.ir && names.insert(k.name).second) all.push_back(std::move(k));
    }
  }
  return all;
}

// Each JIT test with a cubin cache of its own (tests/runtime/scratch_cache_test.hpp).
class LlvmJit : public testing::ScratchCacheTest {};

TEST(LlvmBackend, ReportsItsModuleAndVersion) {
  REQUIRE_LLVM();
  EXPECT_EQ(llvm_backend::unavailable_reason(), "");
  EXPECT_TRUE(contains(llvm_backend::module_path(), "libfp8c_llvm.so"))
      << llvm_backend::module_path();
  EXPECT_EQ(llvm_backend::llvm_version().rfind("19.", 0), 0u) << llvm_backend::llvm_version();
}

TEST(LlvmBackend, EveryIrKernelVerifiesAndAssemblesForSm90aWithoutSpills) {
  REQUIRE_LLVM();
  const auto kernels = ir_kernels();
  ASSERT_GE(kernels.size(), 7u);
  for (const auto& k : kernels) {
    SCOPED_TRACE(k.name);
    // The emitter runs LLVM's verifier on both and throws with its message.
    const std::string raw = llvm_backend::llvm_ir(*k.ir, "sm_90a", false);
    const std::string optimized = llvm_backend::llvm_ir(*k.ir, "sm_90a", true);
    EXPECT_TRUE(contains(raw, "define ")) << raw;
    EXPECT_TRUE(contains(raw, "@" + k.entry)) << raw;
    EXPECT_TRUE(contains(raw, "alloca")) << "locals start as allocas";
    EXPECT_FALSE(contains(optimized, "alloca")) << "O3 promotes every local\n" << optimized;
    const std::string ptx = llvm_backend::ptx(*k.ir, "sm_90a");
    EXPECT_TRUE(contains(ptx, ".target sm_90a")) << ptx;
    EXPECT_TRUE(contains(ptx, ".entry " + k.entry)) << ptx;
    EXPECT_TRUE(contains(ptx, ".maxntid " + std::to_string(k.ir->max_threads))) << ptx;
    const runtime::NvrtcOutput c =
        runtime::compile_ptx_to_cubin(ptx, k.name + ".ptx", k.entry, "sm_90a");
    EXPECT_FALSE(c.cubin.empty());
    EXPECT_GT(c.registers, 0);
    EXPECT_EQ(c.spill_stores, 0) << c.log;
    EXPECT_EQ(c.spill_loads, 0) << c.log;
    EXPECT_EQ(c.stack_frame, 0) << c.log;
  }
}

// The byte transpose's hot path is the instructions it was written for,
// under LLVM as under NVRTC: 16-byte read-only loads, byte permutes, 16-byte
// stores, barriers.
TEST(LlvmBackend, TransposeLowersToTheIntendedInstructions) {
  REQUIRE_LLVM();
  const KernelSource k = emit_cuda(TransposeKernel{1});
  const std::string ptx = llvm_backend::ptx(*k.ir, "sm_90a");
  for (const char* instruction : {"ld.global.nc.v4.u32", "prmt.b32", "st.global.v4.u32", "bar.sync",
                                  "st.shared.u32", "ld.shared.v4.u32"})
    EXPECT_TRUE(contains(ptx, instruction)) << instruction << "\n" << ptx;
  EXPECT_FALSE(contains(ptx, ".local")) << ptx;
}

// The epilogue's hot path is the instructions it was written for, under
// LLVM as under NVRTC: 16-byte read-only loads, 16-byte stores of z and
// 8-byte stores of FP8 codes (plain, not streaming: z is read again soon),
// paired conversions, tanh.approx, one barrier and one atomic for the amax;
// backward, dy * act'(z) rounded before it is summed (no FMA where the
// derivative has none), the quarters' sums through shared memory.
TEST(LlvmBackend, EpilogueLowersToTheIntendedInstructions) {
  REQUIRE_LLVM();
  EpilogueKernel forward;
  forward.bias = forward.store_pre = forward.amax = true;
  forward.activation = Activation::gelu;
  forward.output = ElemType::e4m3;
  const std::string ptx = llvm_backend::ptx(*emit_cuda(forward).ir, "sm_90a");
  for (const char* instruction : {"ld.global.nc.v4.u32", "st.global.v4.u32", "st.global.v2.u32",
                                  "cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.bf16x2.f32",
                                  "tanh.approx.f32", "bar.sync", "atom.global.max.u32"})
    EXPECT_TRUE(contains(ptx, instruction)) << instruction << "\n" << ptx;
  for (const char* absent : {".local", "st.global.cs"})
    EXPECT_FALSE(contains(ptx, absent)) << absent << "\n" << ptx;
  EpilogueKernel backward;
  backward.backward = backward.dbias = true;
  backward.activation = Activation::relu;
  const std::string bwd = llvm_backend::ptx(*emit_cuda(backward).ir, "sm_90a");
  for (const char* instruction :
       {"ld.global.nc.v4.u32", "st.global.v4.u32", "mul.rn.f32", "st.shared.f32", "ld.shared.f32"})
    EXPECT_TRUE(contains(bwd, instruction)) << instruction << "\n" << bwd;
  for (const char* absent : {".local", "fma.rn.f32"})
    EXPECT_FALSE(contains(bwd, absent)) << absent << "\n" << bwd;
}

// The block quantize kernel's hot path is the instructions of the CUDA text
// it replaced: 16-byte read-only loads, amaxes two 16-bit halves at a time,
// half-warp shuffles, 8-byte streaming row stores, 4-byte streaming column
// stores from shared staging, IEEE division for the scales.
TEST(LlvmBackend, BlockQuantizeLowersToTheIntendedInstructions) {
  REQUIRE_LLVM();
  BlockQuantizeKernel k;
  k.rowwise = k.columnwise = true;
  const std::string ptx = llvm_backend::ptx(*emit_cuda(k).ir, "sm_90a");
  for (const char* instruction :
       {"ld.global.nc.v4.u32", "max.u16x2", "shfl.sync.bfly.b32", "cvt.rn.satfinite.e4m3x2.f32",
        "st.global.cs.v2.u32", "st.global.cs.u32", "st.shared.v4.u32", "ld.shared.v4.f32",
        "bar.sync", "bar.warp.sync", "div.rn.f32"})
    EXPECT_TRUE(contains(ptx, instruction)) << instruction << "\n" << ptx;
  for (const char* absent : {".local", "div.approx", "div.full", "rcp.approx"})
    EXPECT_FALSE(contains(ptx, absent)) << absent << "\n" << ptx;
}

// The scale update divides with IEEE division only, under LLVM as in the
// CUDA print (div.rn.f32, never an approximate reciprocal or division).
TEST(LlvmBackend, ScaleUpdateDividesWithIeeeDivisionOnly) {
  REQUIRE_LLVM();
  const KernelSource k =
      emit_cuda(ScaleUpdateKernel{{ElemType::e4m3, ElemType::e5m2}, 16, 1, AmaxAlgo::max});
  const std::string ptx = llvm_backend::ptx(*k.ir, "sm_90a");
  EXPECT_TRUE(contains(ptx, "div.rn.f32")) << ptx;
  for (const char* approximate : {"div.approx", "div.full", "rcp.approx", ".ftz"})
    EXPECT_FALSE(contains(ptx, approximate)) << approximate << "\n" << ptx;
}

// The dequantize kernel's fast path is the instructions it was written for,
// under LLVM as under NVRTC: two-code FP8 conversions, word loads through the
// read-only path, 8-byte (bf16) and 16-byte (fp32) stores, the padded tile
// in shared memory for the transpose, 1 / s correctly rounded (div.rn, or
// LLVM's rcp.rn: the same IEEE reciprocal); nothing approximate, nothing in
// local memory.
TEST(LlvmBackend, DequantizeLowersToTheIntendedInstructions) {
  REQUIRE_LLVM();
  const auto ptx_of = [](const DequantizeKernel& k) {
    return llvm_backend::ptx(*emit_cuda(k).ir, "sm_90a");
  };
  const std::string bf16 = ptx_of({ElemType::e4m3, Scaling::per_tensor, ElemType::bf16});
  for (const char* instruction :
       {"cvt.rn.f16x2.e4m3x2", "cvt.f32.f16", "ld.global.nc.u32", "ld.global.nc.u8",
        "cvt.rn.bf16x2.f32", "st.global.v2.u32", "mul.rn.f32"})
    EXPECT_TRUE(contains(bf16, instruction)) << instruction << "\n" << bf16;
  EXPECT_TRUE(contains(bf16, "div.rn.f32") || contains(bf16, "rcp.rn.f32")) << bf16;
  const std::string fp32 = ptx_of({ElemType::e5m2, Scaling::mx_1x32, ElemType::fp32, true, true});
  for (const char* instruction : {"cvt.rn.f16x2.e5m2x2", "st.shared.f32", "bar.sync", "ld.shared",
                                  "st.global.v2", "shfl.sync.bfly.b32", "atom.global.max.u32"})
    EXPECT_TRUE(contains(fp32, instruction)) << instruction << "\n" << fp32;
  EXPECT_TRUE(
      contains(ptx_of({ElemType::e4m3, Scaling::block_1x128, ElemType::fp32}), "st.global.v4.f32"));
  for (const std::string& ptx : {bf16, fp32}) {
    for (const char* never : {"div.approx", "div.full", "rcp.approx", ".ftz", "fma.rn", ".local"})
      EXPECT_FALSE(contains(ptx, never)) << never << "\n" << ptx;
  }
}

// Every intrinsic of the IR lowers (NVVM intrinsic or inline PTX), verifies
// and assembles; the PTX-only ones are the instructions the CUDA print uses.
TEST(LlvmBackend, EveryIntrinsicLowersToItsInstruction) {
  REQUIRE_LLVM();
  const ir::Kernel kernel = ir::testing::every_intrinsic_kernel();
  const std::string ptx = llvm_backend::ptx(kernel, "sm_90a");
  for (const char* instruction :
       {"cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f32", "cvt.rn.f16x2.e4m3x2",
        "cvt.rn.f16x2.e5m2x2", "cvt.rn.bf16x2.f32", "cvt.rn.f16x2.f32", "cvt.rn.bf16.f32",
        "cvt.rn.f16.f32", "cvt.f32.f16", "tanh.approx.f32", "ex2.approx.f32", "div.approx.f32",
        "prmt.b32", "clz.b32", "shfl.sync.bfly.b32", "fma.rn.f32", "max.u16x2"})
    EXPECT_TRUE(contains(ptx, instruction)) << instruction << "\n" << ptx;
  const runtime::NvrtcOutput c =
      runtime::compile_ptx_to_cubin(ptx, "every_intrinsic.ptx", kernel.name, "sm_90a");
  EXPECT_FALSE(c.cubin.empty());
  EXPECT_EQ(c.spill_stores + c.spill_loads, 0) << c.log;
}

TEST(LlvmBackend, AnArchitectureLlvmDoesNotKnowIsAnError) {
  REQUIRE_LLVM();
  const KernelSource k = emit_cuda(TransposeKernel{4});
  try {
    (void)llvm_backend::ptx(*k.ir, "sm_9000");
    FAIL() << "sm_9000 accepted";
  } catch (const std::exception& e) {
    EXPECT_TRUE(contains(e.what(), "sm_9000")) << e.what();
  }
}

TEST_F(LlvmJit, KeysCompilesAndCachesIrKernelsApartFromNvrtc) {
  REQUIRE_LLVM();
  const runtime::Jit llvm = jit("sm_90a", KernelBackend::llvm);
  const runtime::Jit nvrtc = jit("sm_90a", KernelBackend::nvrtc);
  const KernelSource transpose = emit_cuda(TransposeKernel{1});
  ASSERT_TRUE(llvm.lowers_through_llvm(transpose));
  EXPECT_FALSE(nvrtc.lowers_through_llvm(transpose));
  EXPECT_NE(llvm.key(transpose), nvrtc.key(transpose));

  const runtime::CompiledKernel built = llvm.compile(transpose);
  EXPECT_EQ(built.cache, runtime::CacheOutcome::compiled);
  EXPECT_EQ(built.compiler,
            "llvm " + llvm_backend::llvm_version() + " + " + runtime::ptx_compiler_version());
  EXPECT_EQ(built.spill_stores + built.spill_loads, 0);
  const runtime::CompiledKernel again = llvm.compile(transpose);
  EXPECT_EQ(again.cache, runtime::CacheOutcome::hit);
  EXPECT_EQ(again.cubin, built.cubin);
  EXPECT_EQ(again.compiler, built.compiler);
  // The same kernel under NVRTC is another entry, another CUBIN.
  const runtime::CompiledKernel by_nvrtc = nvrtc.compile(transpose);
  EXPECT_EQ(by_nvrtc.cache, runtime::CacheOutcome::compiled);
  EXPECT_EQ(by_nvrtc.compiler.rfind("nvrtc ", 0), 0u) << by_nvrtc.compiler;
  EXPECT_NE(by_nvrtc.cubin, built.cubin);
}

// A change to the IR is a change to the key, even where it is one constant.
TEST_F(LlvmJit, TheKeyFollowsTheIr) {
  REQUIRE_LLVM();
  const runtime::Jit llvm = jit("sm_90a", KernelBackend::llvm);
  KernelSource a = emit_cuda(TransposeKernel{4});
  KernelSource b = a;
  auto changed = std::make_shared<ir::Kernel>(*a.ir);
  changed->max_threads = 128;
  b.ir = changed;
  EXPECT_NE(llvm.key(a), llvm.key(b));
  // Not the CUDA text: LLVM never reads it.
  KernelSource c = a;
  c.source += "// a comment\n";
  EXPECT_EQ(llvm.key(a), llvm.key(c));
  EXPECT_NE(jit().key(a), jit().key(c));
}

// Under backend = llvm, a plan's kinds without IR go through NVRTC, in one
// compile_all with the IR ones, each named with its compiler.
TEST_F(LlvmJit, ExampleKernelsMixBothCompilers) {
  REQUIRE_LLVM();
  const Spec spec = load_spec(testing::examples_dir() + "/gpt_mlp.fp8");
  const LoweredPlan lowered = lower_plan(spec, plan_spec(spec, {std::nullopt, 1024}));
  std::vector<KernelSource> sources;
  for (const auto& p : lowered.kernels) sources.push_back(emit_cuda(p.kernel));
  const auto compiled = jit("sm_90a", KernelBackend::llvm).compile_all(sources, 2);
  ASSERT_EQ(compiled.size(), sources.size());
  int llvm_built = 0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    SCOPED_TRACE(sources[i].name);
    EXPECT_EQ(compiled[i].name, sources[i].name);
    EXPECT_FALSE(compiled[i].cubin.empty());
    const bool llvm = sources[i].ir != nullptr;
    llvm_built += llvm;
    EXPECT_EQ(compiled[i].compiler.rfind(llvm ? "llvm " : "nvrtc ", 0), 0u) << compiled[i].compiler;
  }
  EXPECT_GE(llvm_built, 1);
}

// PTX handed over as the source (SourceLanguage::ptx) is assembled as it
// is; PTX that does not assemble is an error naming the kernel.
TEST_F(LlvmJit, PtxSourcesAreAssembledAndBadPtxNamesTheKernel) {
  REQUIRE_LLVM();
  const runtime::Jit nvrtc = jit();
  const KernelSource ir = emit_cuda(TransposeKernel{4});
  KernelSource ptx{ir.name, ir.entry, llvm_backend::ptx(*ir.ir, "sm_90a"), {}, SourceLanguage::ptx};
  const runtime::CompiledKernel c = nvrtc.compile(ptx);
  EXPECT_FALSE(c.cubin.empty());
  EXPECT_EQ(c.compiler, runtime::ptx_compiler_version());
  ptx.name = "broken_ptx";
  ptx.source =
      ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry broken_ptx() { bogus; }\n";
  try {
    (void)nvrtc.compile(ptx);
    FAIL() << "bad PTX assembled";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "broken_ptx")) << e.what();
  }
}

}  // namespace
}  // namespace fp8c
