// The epilogue and dequantize kernels compile with NVRTC for sm_90a with no
// register spills and no compiler warning (no GPU needed, so this runs in
// CI), and plans map their epilogue and dequantize steps to these kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include "codegen/lower/lowered.hpp"
#include "codegen/plan/planner.hpp"
#include "epilogue_variants.hpp"
#include "fp8c/dsl.hpp"
#include "runtime/nvrtc.hpp"
#include "tests/test_paths.hpp"

namespace fp8c::runtime {
namespace {

// Compiles every source on all cores; a failure or warning names its kernel.
void expect_clean_compiles(const std::vector<KernelSource>& sources) {
  std::vector<std::future<NvrtcOutput>> pending;
  std::vector<NvrtcOutput> done;
  const std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
  for (std::size_t i = 0; i < sources.size(); ++i) {
    if (pending.size() == threads) {
      done.push_back(pending.front().get());
      pending.erase(pending.begin());
    }
    pending.push_back(std::async(std::launch::async, [&, i] {
      return compile_to_cubin(sources[i].source, sources[i].name + ".cu", sources[i].entry,
                              "sm_90a", sources[i].options);
    }));
  }
  for (auto& p : pending) done.push_back(p.get());
  for (std::size_t i = 0; i < done.size(); ++i) {
    const NvrtcOutput& c = done[i];
    const std::string& name = sources[i].name;
    EXPECT_FALSE(c.cubin.empty()) << name;
    EXPECT_GT(c.registers, 0) << name;
    EXPECT_EQ(c.spill_stores, 0) << name;
    EXPECT_EQ(c.spill_loads, 0) << name;
    EXPECT_EQ(c.log.find("warning"), std::string::npos) << name << ":\n" << c.log;
  }
}

template <typename Kernel>
void add_sources(const std::vector<Kernel>& kernels, std::vector<KernelSource>& sources,
                 std::set<std::string>& names) {
  for (const auto& k : kernels) {
    sources.push_back(emit_cuda(k));
    EXPECT_TRUE(names.insert(k.name()).second) << "two variants named " << k.name();
    EXPECT_EQ(sources.back().source.find("#include"), std::string::npos)
        << k.name() << " must be self-contained";
    EXPECT_EQ(sources.back().entry, k.name());
  }
}

TEST(EpilogueCompile, EveryEpilogueAndDequantizeVariantCompilesCleanly) {
  std::vector<KernelSource> sources;
  std::set<std::string> names;
  add_sources(testing::epilogue_variants(), sources, names);
  add_sources(testing::dequantize_variants(), sources, names);
  expect_clean_compiles(sources);
}

TEST(EpilogueCompile, BadDescriptionsAreRejected) {
  EpilogueKernel k;
  k.input = ElemType::e4m3;
  EXPECT_THROW(emit_cuda(k), std::invalid_argument);
  k = {};
  k.output = ElemType::e8m0;
  EXPECT_THROW(emit_cuda(k), std::invalid_argument);
  k = {};
  k.dbias = true;  // a backward option on the forward form
  EXPECT_THROW(emit_cuda(k), std::invalid_argument);
  k = {};
  k.backward = true;  // neither dact nor dbias
  EXPECT_THROW(emit_cuda(k), std::invalid_argument);
  k.dbias = true;
  k.bias = true;
  EXPECT_THROW(emit_cuda(k), std::invalid_argument);
  k.bias = false;
  k.output = ElemType::fp16;  // v is stored in the input type, or fp32 (staging)
  EXPECT_THROW(emit_cuda(k), std::invalid_argument);
  k.output = ElemType::fp32;
  EXPECT_NO_THROW(emit_cuda(k));
  EXPECT_THROW(emit_cuda(DequantizeKernel{ElemType::e4m3, Scaling::none, ElemType::bf16}),
               std::invalid_argument);
  EXPECT_THROW(emit_cuda(DequantizeKernel{ElemType::e4m3, Scaling::per_tensor, ElemType::e4m3}),
               std::invalid_argument);
  // The format is an FP8 format.
  EXPECT_THROW(emit_cuda(DequantizeKernel{ElemType::bf16, Scaling::per_tensor, ElemType::bf16}),
               std::invalid_argument);
}

Spec spec_from(const std::string& text) {
  auto r = check_source(SourceFile("inline.fp8", text));
  if (!r.spec) throw std::runtime_error("bad inline spec:\n" + text);
  return *r.spec;
}

// Row layers whose epilogue is a step (activation, FP8 output for a delayed
// consumer) and debug fallbacks that dequantize every kind of operand the
// planner dequantizes (never a 128x128 weight: a fallback reads the
// high-precision weight, which each rank has whole).
const char* kRowChain = R"(
layout tp = { tensor_parallel = 2  sequence_parallel = true }
layer a = linear {
  in = 256  out = 256  bias = true  activation = silu  output = fp8
  recipe = delayed {}  layout = tp row
}
layer b = linear { input = a  out = 256  recipe = delayed {}  layout = tp column }
)";
const char* kDebugFallbacks = R"(
layout tp = { tensor_parallel = 2  sequence_parallel = true }
layer a = linear {
  in = 256  out = 512  bias = true  activation = gelu  recipe = blockwise {}
  layout = tp column  debug = { stats = true  fallback = all }
}
layer c = linear {
  in = 512  out = 256  bias = true  activation = relu  recipe = mxfp8 {}
  layout = tp row  debug = { fallback = dgrad wgrad }
}
layer d = linear {
  in = 256  out = 256  bias = true  dtype = fp16  recipe = current {}
  layout = tp row  debug = { fallback = all }
}
)";

// Every example's lowered plan and the inline specs' at 1, 2, 4 and 8 ranks:
// the epilogue kernels (steps, staged dact, activations after GEMMs) and the
// dequantize kernels of block-scaled GEMM operands compile.
TEST(EpilogueCompile, PlansMapEpilogueAndDequantizeStepsToKernels) {
  std::vector<Spec> specs;
  for (const auto& entry : std::filesystem::directory_iterator(::fp8c::testing::examples_dir()))
    if (entry.path().extension() == ".fp8") specs.push_back(load_spec(entry.path().string()));
  specs.push_back(spec_from(kRowChain));
  specs.push_back(spec_from(kDebugFallbacks));
  // On cuBLASLt, whose fallbacks (kernels after the GEMM, dequantized
  // operands) these kernels are.
  for (Spec& spec : specs)
    for (Layer& layer : spec.layers) layer.gemm = GemmBackend::cublaslt;
  std::vector<KernelSource> sources;
  std::set<std::string> names;
  for (const Spec& spec : specs) {
    for (std::uint32_t ranks : {1u, 2u, 4u, 8u}) {
      Plan plan;
      try {
        plan = plan_spec(spec, {ranks, 1024});
      } catch (const PlanError&) {
        continue;  // does not split over that many ranks
      }
      // With the block-scaled GEMM and without it (a GPU or cuBLASLt that
      // has none dequantizes every block-scaled operand).
      LowerOptions no_block_gemm;
      no_block_gemm.block_scaled_gemm = false;
      for (const LowerOptions& options : {LowerOptions{}, no_block_gemm})
        for (const auto& p : lower_plan(spec, plan, options).kernels) {
          const bool ours = std::holds_alternative<EpilogueKernel>(p.kernel.description) ||
                            std::holds_alternative<DequantizeKernel>(p.kernel.description);
          if (ours && names.insert(p.kernel.name()).second) sources.push_back(emit_cuda(p.kernel));
        }
    }
  }
  // The forms the plans need, as the CPU executor runs them.
  for (const char* name : {"epilogue_bf16_bias_to_bf16", "epilogue_bf16_bias_silu_z_to_e4m3_amax",
                           "epilogue_bf16_bias_relu_z_to_bf16", "epilogue_bwd_fp16_drelu_dbias",
                           "epilogue_bwd_bf16_dgelu_dbias", "epilogue_fp16_bias_to_fp16",
                           "dequantize_e4m3_b1x128_to_bf16_t", "dequantize_e4m3_b128x128_to_bf16",
                           "dequantize_e5m2_mx1x32_to_bf16_t", "dequantize_e5m2_mx1x32_to_bf16"})
    EXPECT_TRUE(names.count(name)) << "no plan maps a step to " << name;
  expect_clean_compiles(sources);
}

}  // namespace
}  // namespace fp8c::runtime
