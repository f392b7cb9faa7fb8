// The GPU executor against the CPU reference executor: every recipe x
// {column, row} x {sequence parallel or not} x {1, 2, 4, 8} ranks (all ranks
// on one GPU), and every example spec. Rules in runtime/gpu/gpu_verify.hpp.
// Skipped, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <thread>

#include "../cpu/cpu_test_support.hpp"
#include "../runtime/gpu_fixture.hpp"
#include "codegen/plan/planner.hpp"
#include "collectives/device/local_device_group.hpp"
#include "fp8c/dsl.hpp"
#include "runtime/gpu/gpu_verify.hpp"
#include "runtime/gpu/kernel_set.hpp"
#include "runtime/gpu/rank_executor.hpp"
#include "runtime/gpu/run_layer.hpp"
#include "tests/test_paths.hpp"

namespace fp8c::runtime {
namespace {

using cpu::testing::layer_text;
using cpu::testing::spec_from;
using fp8c::testing::gpu;

void expect_passes(const Spec& spec, const cpu::VerifyOptions& o) {
  const cpu::VerifyReport report = verify_spec_on_gpu(spec, o, *gpu().device, *gpu().jit);
  EXPECT_FALSE(report.checks.empty());
  EXPECT_TRUE(report.passed()) << cpu::format_report(report);
  if (::testing::Test::HasFailure() || std::getenv("FP8C_PRINT_REPORT"))
    std::cout << cpu::format_report(report);
}

class GpuMatrix : public ::testing::TestWithParam<cpu::testing::MatrixCase> {};

TEST_P(GpuMatrix, GpuEqualsCpuReference) {
  REQUIRE_GPU();
  const cpu::testing::MatrixCase& c = GetParam();
  const bool column = c.mode == "column";
  const int in = column ? 256 : 1024;
  const int out = column ? 1024 : 256;
  const Spec spec = spec_from(
      layer_text(c.recipe, c.mode, c.sp, c.ranks, in, out, "bias = true  activation = gelu"));
  cpu::VerifyOptions o;
  o.tokens = 1024;
  o.steps = c.recipe.rfind("delayed", 0) == 0 ? 3 : 1;
  expect_passes(spec, o);
}

INSTANTIATE_TEST_SUITE_P(All, GpuMatrix, ::testing::ValuesIn(cpu::testing::matrix_cases()),
                         cpu::testing::matrix_case_name);

// The same matrix with `gemm = generated` (fp8c's own FP8 GEMM, its
// epilogue fused: SiLU on row layers, which cuBLASLt cannot fuse), at 1 and
// 4 ranks; every FP8 recipe (MXFP8 included) must put its three GEMMs on it.
class GpuMatrixGenerated : public ::testing::TestWithParam<cpu::testing::MatrixCase> {};

TEST_P(GpuMatrixGenerated, GpuEqualsCpuReference) {
  REQUIRE_GPU();
  if (gpu().device->arch() != "sm_90a")
    GTEST_SKIP() << "the generated GEMM needs sm_90a; this GPU is " << gpu().device->arch();
  const cpu::testing::MatrixCase& c = GetParam();
  const bool column = c.mode == "column";
  const Spec spec = spec_from(layer_text(
      c.recipe, c.mode, c.sp, c.ranks, column ? 256 : 1024, column ? 1024 : 256,
      std::string("bias = true  gemm = generated  activation = ") + (column ? "gelu" : "silu")));
  PlanOptions po;
  po.ranks = static_cast<std::uint32_t>(c.ranks);
  po.tokens = 1024;
  const Plan plan = plan_spec(spec, po);
  const LoweredLayer lowered =
      lower_for_gpu(spec.layers[0], plan.layers[0], cublaslt_lower_options());
  int generated = 0;
  for (const auto* pass : {&lowered.forward, &lowered.backward})
    for (const auto& step : *pass)
      for (const auto& a : step.actions)
        if (const auto* g = std::get_if<GemmCall>(&a)) generated += g->backend == "generated";
  const bool fp8 = c.recipe != "none";
  EXPECT_EQ(generated, fp8 ? 3 : 0);
  cpu::VerifyOptions o;
  o.tokens = 1024;
  o.steps = c.recipe.rfind("delayed", 0) == 0 ? 3 : 1;
  expect_passes(spec, o);
}

std::vector<cpu::testing::MatrixCase> generated_matrix_cases() {
  std::vector<cpu::testing::MatrixCase> cases;
  for (const auto& c : cpu::testing::matrix_cases())
    if (c.ranks == 1 || c.ranks == 4) cases.push_back(c);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, GpuMatrixGenerated, ::testing::ValuesIn(generated_matrix_cases()),
                         cpu::testing::matrix_case_name);

class GpuExamples : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuExamples, GpuEqualsCpuReference) {
  REQUIRE_GPU();
  const Spec spec = load_spec(::fp8c::testing::examples_dir() + "/" + GetParam() + ".fp8");
  cpu::VerifyOptions o;
  o.tokens = 64;
  o.steps = 2;
  o.force = true;  // the CPU reference of 8192 x 28672 layers at 64 tokens
  expect_passes(spec, o);
}

// Blockwise layers whose every GEMM the lowering gives to cuBLASLt's
// block-scaled FP8 GEMM (fprop and dgrad 1x128 x 128x128, the wgrad 1x128 x
// 1x128 read one rank segment at a time, GELU applied after the GEMM): the
// same checks against the CPU reference as every layer.
TEST(GpuExecutor, BlockScaledFp8GemmsPassTheSameChecks) {
  REQUIRE_GPU();
  for (const char* mode : {"column", "row"})
    for (int ranks : {1, 2, 4}) {
      SCOPED_TRACE(std::string(mode) + " " + std::to_string(ranks) + " ranks");
      const bool column = std::string(mode) == "column";
      const Spec spec =
          spec_from(layer_text("blockwise", mode, true, ranks, column ? 512 : 2048,
                               column ? 2048 : 512, "bias = true  activation = gelu"));
      PlanOptions po;
      po.ranks = static_cast<std::uint32_t>(ranks);
      po.tokens = 512;
      const Plan plan = plan_spec(spec, po);
      const LoweredLayer lowered =
          lower_for_gpu(spec.layers[0], plan.layers[0], cublaslt_lower_options());
      int fp8 = 0;
      for (const auto* pass : {&lowered.forward, &lowered.backward})
        for (const auto& step : *pass)
          for (const auto& a : step.actions)
            if (const auto* g = std::get_if<GemmCall>(&a)) {
              EXPECT_EQ(g->operands, GemmCall::Operands::fp8) << to_string(g->role);
              ++fp8;
            }
      EXPECT_EQ(fp8, 3);
      cpu::VerifyOptions o;
      o.tokens = 512;
      o.ranks = static_cast<std::uint32_t>(ranks);
      expect_passes(spec, o);
    }
}

// Every example with each layer on `gemm = generated`.
class GpuExamplesGenerated : public GpuExamples {};

TEST_P(GpuExamplesGenerated, GpuEqualsCpuReference) {
  REQUIRE_GPU();
  if (gpu().device->arch() != "sm_90a")
    GTEST_SKIP() << "the generated GEMM needs sm_90a; this GPU is " << gpu().device->arch();
  Spec spec = load_spec(::fp8c::testing::examples_dir() + "/" + GetParam() + ".fp8");
  for (Layer& layer : spec.layers) layer.gemm = GemmBackend::generated;
  cpu::VerifyOptions o;
  o.tokens = 64;
  o.steps = 2;
  o.force = true;
  expect_passes(spec, o);
}

INSTANTIATE_TEST_SUITE_P(All, GpuExamplesGenerated,
                         ::testing::Values("ada_delayed", "current_scaling_debug",
                                           "single_gpu_reference", "blockwise_mlp", "mxfp8_proj",
                                           "gpt_mlp", "attention_out_then_mlp"));

INSTANTIATE_TEST_SUITE_P(All, GpuExamples,
                         ::testing::Values("ada_delayed", "current_scaling_debug",
                                           "single_gpu_reference", "blockwise_mlp", "mxfp8_proj",
                                           "gpt_mlp", "attention_out_then_mlp"));

// The FP8 chains of tests/specs, each layer run alone on the GPU at one and
// two ranks, on cuBLASLt and on the generated GEMM: the producer whose dz
// its consumer's dgrad hands over (made on the host for it, from the GPU's
// z), and the consumer whose dgrad epilogue makes that dz (dact of a z it is
// given, dbias, amax, both usages) on either backend.
TEST(GpuExecutor, Fp8ChainLayersPassTheSameChecks) {
  REQUIRE_GPU();
  for (const char* name : {"chain_fp8_output", "chain_fp8_output_sp"})
    for (const GemmBackend backend : {GemmBackend::automatic, GemmBackend::generated}) {
      if (backend == GemmBackend::generated && gpu().device->arch() != "sm_90a") continue;
      Spec spec =
          load_spec(::fp8c::testing::source_path(std::string("tests/specs/") + name + ".fp8"));
      for (Layer& layer : spec.layers) layer.gemm = backend;
      for (const std::uint32_t ranks : {1u, 2u}) {
        SCOPED_TRACE(std::string(name) + " on " + std::string(to_string(backend)) + " at " +
                     std::to_string(ranks) + " ranks");
        cpu::VerifyOptions o;
        o.tokens = 64;
        o.steps = 2;
        o.ranks = ranks;
        expect_passes(spec, o);
      }
    }
}

// overlap = bulk / ring: collectives on their own stream, ordered by events
// with the steps that produce and read their tensors (bulk), or split into
// ring shifts pipelined with the GEMM's rank chunks (ring: the fprop's
// x gather and the wgrad's K segments of a column layer, the reduce-scatter
// of a row layer's y and a column layer's dx); same checks.
TEST(GpuExecutor, OverlappedCollectivesPassTheSameChecks) {
  REQUIRE_GPU();
  for (const char* overlap : {"bulk", "ring"})
    for (const char* mode : {"column", "row"}) {
      SCOPED_TRACE(std::string(overlap) + " " + mode);
      const std::string text =
          std::string(
              "layer l = linear {\n  in = 512  out = 1024  bias = true  activation = gelu\n"
              "  recipe = delayed { history = 4 }\n"
              "  layout = { tensor_parallel = 4  sequence_parallel = true  overlap = ") +
          overlap + " } " + mode + "\n}\n";
      cpu::VerifyOptions o;
      o.tokens = 512;
      o.steps = 2;
      expect_passes(spec_from(text), o);
    }
}

// The ring over recipes, dtypes and rank counts (3: not a power of two; 8:
// seven shifts), with token chunks that are no multiple of a GEMM tile.
TEST(GpuExecutor, RingsPassTheSameChecksAtEveryRankCount) {
  REQUIRE_GPU();
  const bool hopper = gpu().device->arch() == "sm_90a";
  for (const char* recipe : {"delayed { history = 4 }", "current", "none"})
    for (const char* mode : {"column", "row"})
      for (int ranks : {2, 3, 8}) {
        const char* dtype = ranks == 3 ? "fp16" : "bf16";
        // The generated GEMM's row chunks too (M of 48, the start-up
        // compiling the chunk's configuration), where the GPU has it.
        const bool generated = hopper && ranks == 3 && std::string(recipe) != "none";
        SCOPED_TRACE(std::string(recipe) + " " + mode + " " + std::to_string(ranks) + " " + dtype +
                     (generated ? " generated" : ""));
        const bool column = std::string(mode) == "column";
        const std::string text =
            "layer l = linear {\n  in = " + std::to_string(column ? 160 : 48 * ranks) +
            "  out = " + std::to_string(column ? 96 * ranks : 208) +
            "  bias = true  dtype = " + dtype + (generated ? "  gemm = generated" : "") +
            "\n  recipe = " + recipe + "\n  layout = { tensor_parallel = " + std::to_string(ranks) +
            "  sequence_parallel = true  overlap = ring } " + mode + "\n}\n";
        const Spec spec = spec_from(text);
        PlanOptions po;
        // 128 tokens per rank: an FP8 column layer's wgrad reads x by rank
        // segments of K (a gather_k ring); 48: no multiple of a GEMM tile.
        const bool k_ring = column && std::string(recipe) != "none" && ranks != 2;
        po.tokens = (k_ring ? 128 : 48) * static_cast<std::uint64_t>(ranks);
        const Plan plan = plan_spec(spec, po);
        const LoweredLayer lowered =
            lower_for_gpu(spec.layers[0], plan.layers[0], cublaslt_lower_options());
        int rings = 0, k_rings = 0;
        for (const auto* pass : {&lowered.forward, &lowered.backward})
          for (const auto& step : *pass)
            if (const auto* g = step.find<GemmCall>()) {
              rings += g->ring != RingForm::none;
              k_rings += g->ring == RingForm::gather_k;
            }
        EXPECT_GE(rings, 1);
        EXPECT_EQ(k_rings, k_ring ? 1 : 0);
        cpu::VerifyOptions o;
        o.tokens = po.tokens;
        o.steps = 2;
        expect_passes(spec, o);
      }
}

TEST(GpuExecutor, OneFailingRankEndsEveryRankWithAnErrorNotAHang) {
  REQUIRE_GPU();
  const Spec spec = spec_from(layer_text("current", "column", true, 4, 256, 512));
  const Layer& layer = spec.layers[0];
  PlanOptions po;
  po.tokens = 512;
  const Plan plan = plan_spec(spec, po);
  GpuRunOptions o;
  o.fail_rank = 2;
  o.timeout = std::chrono::milliseconds(2000);
  const auto start = std::chrono::steady_clock::now();
  try {
    run_layer_on_gpu(*gpu().device, *gpu().jit, layer, plan.layers[0],
                     {cpu::random_layer_data(layer, 512, 1)}, o);
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 failed on purpose"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// nan = error with a NaN in one rank's shard only: the verdict is agreed on
// the device, so every rank reports it (the one that holds the NaN names the
// tensor) and none goes on alone; all within the collectives' timeout.
TEST(GpuExecutor, ANanOnOneRankIsReportedByEveryRank) {
  REQUIRE_GPU();
  for (const char* mode : {"column", "row"}) {
    SCOPED_TRACE(mode);
    const Spec spec = spec_from(
        layer_text("delayed { history = 4  nan = error }", mode, true, 2, 256, 512, "bias = true"));
    const Layer& layer = spec.layers[0];
    PlanOptions po;
    po.tokens = 256;
    const Plan plan = plan_spec(spec, po);
    cpu::LayerData data = cpu::random_layer_data(layer, 256, 3);
    // Token 200, feature 200: rank 1's sequence shard (column + SP) and
    // feature shard (row).
    data.x[200 * layer.in + 200] = NAN;
    const KernelSet kernels(*gpu().jit,
                            lower_for_gpu(layer, plan.layers[0], cublaslt_lower_options()).kernels);
    LocalDeviceGroup group(2, std::chrono::milliseconds(20000), *gpu().jit);
    std::vector<std::unique_ptr<DeviceCommunicator>> comms;
    for (int r = 0; r < 2; ++r) comms.push_back(group.communicator(r));
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        try {
          gpu().device->make_current();
          run_rank_on_gpu(kernels, *comms[static_cast<std::size_t>(r)], layer, plan.layers[0],
                          {data});
          errors[static_cast<std::size_t>(r)] = "(no error)";
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    EXPECT_NE(errors[1].find("NaN in l.x"), std::string::npos) << errors[1];
    EXPECT_NE(errors[0].find("NaN in a tensor on another rank"), std::string::npos) << errors[0];
  }
}

}  // namespace
}  // namespace fp8c::runtime
