// Every generated kernel compiles with NVRTC for sm_90a with no register
// spills. NVRTC needs no GPU, so this runs in CI.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "codegen/lower/lowered.hpp"
#include "codegen/plan/planner.hpp"
#include "compile_check.hpp"
#include "fp8c/dsl.hpp"
#include "kernel_variants.hpp"
#include "runtime/jit.hpp"
#include "tests/test_paths.hpp"

namespace fp8c::runtime {
namespace {

TEST(KernelCompile, EveryQuantizeVariantCompilesWithoutSpills) {
  std::vector<KernelSource> sources;
  std::set<std::string> names;
  for (const auto& k : testing::quantize_variants()) {
    sources.push_back(emit_cuda(k));
    EXPECT_TRUE(names.insert(k.name()).second) << "two variants named " << k.name();
    EXPECT_EQ(sources.back().source.find("#include"), std::string::npos)
        << k.name() << " must be self-contained";
  }
  sources.push_back(emit_cuda(DbiasReduceKernel{}));
  sources.push_back(emit_cuda(DbiasReduceKernel{ElemType::fp32, 8}));  // the generated GEMM's
  sources.push_back(emit_cuda(DbiasReduceKernel{ElemType::bf16, 8}));
  auto blocks = testing::block_quantize_variants();
  for (const auto& k : testing::block_quantize_dact_variants()) blocks.push_back(k);
  for (const auto& k : blocks) {
    sources.push_back(emit_cuda(k));
    EXPECT_TRUE(names.insert(k.name()).second) << "two variants named " << k.name();
  }
  testing::expect_compiles_without_spills(sources, "fp8c-kernel-compile-test");
}

// The block quantize kernels (built as IR, printed for NVRTC) fit their
// launch bounds (64 registers for 16-bit inputs, 128 for fp32 and dact)
// without spilling, in every input type, block shape, usage set and option.
TEST(KernelCompile, EveryBlockQuantizeVariantCompilesWithoutSpills) {
  std::vector<KernelSource> sources;
  for (const auto& k : testing::block_quantize_compile_variants()) sources.push_back(emit_cuda(k));
  testing::expect_compiles_without_spills(sources, "fp8c-block-quantize-compile-test");
}

// A quantize kernel's format is e4m3 or e5m2: any other ElemType is refused,
// never emitted as E5M2.
TEST(KernelCompile, NonFp8FormatsAreRejected) {
  QuantizeKernel q;
  q.format = ElemType::fp16;
  EXPECT_THROW(emit_cuda(q), std::invalid_argument);
  BlockQuantizeKernel b;
  b.format = ElemType::e8m0;
  EXPECT_THROW(emit_cuda(b), std::invalid_argument);
  b.format = ElemType::e5m2;
  EXPECT_NO_THROW(emit_cuda(b));
}

// Every kernel that the plan of every example needs, at the ranks the example
// asks for, compiles without spills.
TEST(KernelCompile, EveryExampleSpecsKernelsCompileWithoutSpills) {
  const std::filesystem::path examples = ::fp8c::testing::examples_dir();
  std::vector<KernelSource> sources;
  std::size_t specs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(examples)) {
    if (entry.path().extension() != ".fp8") continue;
    ++specs;
    const Spec spec = load_spec(entry.path().string());
    const LoweredPlan kernels = lower_plan(spec, plan_spec(spec, {std::nullopt, 1024}));
    for (const auto& p : kernels.kernels) sources.push_back(emit_cuda(p.kernel));
  }
  ASSERT_GE(specs, 5u);
  ASSERT_FALSE(sources.empty());
  const auto dir = testing::process_temp_dir("fp8c-example-compile-test");
  std::filesystem::remove_all(dir);
  const Jit jit("sm_90a", CubinCache(dir.string()));
  for (const auto& c : jit.compile_all(sources)) {
    EXPECT_FALSE(c.cubin.empty()) << c.name;
    EXPECT_EQ(c.spill_stores + c.spill_loads, 0) << c.name;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp8c::runtime
