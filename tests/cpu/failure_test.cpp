// What the oracle and the executor do with broken input: a plan broken the
// way TransformerEngine #530 was (the tests bite), a hung collective, token
// counts that do not divide, partial scaling blocks; and `fp8c verify` as a
// command (exit codes, table, the examples).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "codegen/plan/plan_check.hpp"
#include "codegen/plan/planner.hpp"
#include "collectives/collective_error.hpp"
#include "cpu_test_support.hpp"
#include "runtime/cpu/quantize.hpp"
#include "runtime/cpu/verify.hpp"
#include "tests/test_paths.hpp"

namespace fp8c::cpu {
namespace {

using testing::layer_text;
using testing::spec_from;

const CheckResult& find_check(const VerifyReport& r, const std::string& name) {
  for (const auto& c : r.checks)
    if (c.check == name) return c;
  throw std::runtime_error("no check " + name);
}

// Breaks a column + SP plan the way TE #530 did: wgrad reads the gathered
// columnwise X (rank segments [R][in][tokens/R]) as if it were contiguous
// [in][tokens]: the permute is dropped (or the segmented-K read turned off)
// and the segmented mark erased.
void break_like_te_530(LayerPlan& p) {
  auto& b = p.backward;
  for (auto it = b.begin(); it != b.end(); ++it) {
    const auto* permute = it->as<PermuteStep>();
    if (!permute) continue;
    const int gathered = permute->in, permuted = permute->out;
    b.erase(it);
    for (auto& s : b) s.replace_input(permuted, gathered);
    break;
  }
  for (auto& t : p.tensors) t.segmented.reset();
  for (auto& s : b)
    if (auto* g = s.as<GemmStep>()) g->segmented_k = false;
}

TEST(CpuTestsBite, CheckerRejectsAndOracleCatchesTheTe530Plan) {
  for (std::uint64_t tokens : {256u, 512u}) {  // 64 per rank: permute; 128: segmented K
    for (const std::string recipe : {"current", "delayed { history = 4 }", "mxfp8"}) {
      SCOPED_TRACE(recipe + " tokens " + std::to_string(tokens));
      const Spec spec = spec_from(layer_text(recipe, "column", true, 4, 256, 512));
      PlanOptions po;
      po.ranks = 4;
      po.tokens = tokens;
      LayerPlan broken = plan_spec(spec, po).layers[0];
      break_like_te_530(broken);
      EXPECT_FALSE(check_layer_plan(broken).empty());
      VerifyOptions o;
      o.ranks = 4;
      o.tokens = tokens;
      o.edit_plan = break_like_te_530;
      EXPECT_THROW(verify_spec(spec, o), ExecutorError);  // the executor checks plans
      o.executor.skip_plan_check = true;
      const VerifyReport r = verify_spec(spec, o);
      EXPECT_FALSE(r.passed());
      const auto& dw = find_check(r, "dw: 4 ranks vs 1 rank");
      EXPECT_FALSE(dw.pass);
      EXPECT_GT(dw.rel, 0.5) << format_report(r);  // O(1), not rounding
      EXPECT_GT(find_check(r, "dw: 4 ranks vs float64").rel, 0.5);
      // Forward and dgrad do not read the gathered columnwise X.
      EXPECT_TRUE(find_check(r, "y: 4 ranks vs 1 rank").pass);
      EXPECT_TRUE(find_check(r, "dx: 4 ranks vs 1 rank").pass);
    }
  }
}

TEST(CpuHungCollective, FailsWithCollectiveErrorWithinTheTimeout) {
  for (auto backend : {collectives::Backend::kGloo, collectives::Backend::kInProcess}) {
    const Spec spec = spec_from(layer_text("current", "column", true, 4, 256, 512));
    PlanOptions po;
    po.ranks = 4;
    po.tokens = 256;
    const LayerPlan plan = plan_spec(spec, po).layers[0];
    ExecutorOptions o;
    o.backend = backend;
    o.timeout = std::chrono::milliseconds(2000);
    o.skip_collective_on_rank = 2;
    const auto data = std::vector<LayerData>{random_layer_data(spec.layers[0], 256, 1)};
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(run_layer(spec.layers[0], plan, data, o), collectives::CollectiveError);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  }
}

TEST(CpuBadShapes, TokensNotDivisibleUnderSequenceParallelIsAClearError) {
  const Spec spec = spec_from(layer_text("current", "column", true, 4, 256, 512));
  VerifyOptions o;
  o.tokens = 250;
  try {
    verify_spec(spec, o);
    FAIL() << "expected a PlanError";
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("250 tokens are not divisible by 4 ranks"),
              std::string::npos)
        << e.what();
  }
}

// Dims that are not multiples of the block: edge blocks are partial (their
// amax and scale cover only the elements that exist). The oracle still
// holds, within tolerance where rank shards cut blocks differently.
TEST(CpuBadShapes, PartialBlocksAreHandled) {
  for (const std::string recipe : {"blockwise", "mxfp8", "blockwise { scale = pow2 }"}) {
    for (const std::string mode : {"column", "row"}) {
      SCOPED_TRACE(recipe + " " + mode);
      // 160 (column) and 224 (row) per rank: partial 128-wide blocks; 48
      // tokens per rank: partial columnwise blocks along tokens.
      const Spec spec = spec_from(layer_text(recipe, mode, true, 2, 448, 320));
      VerifyOptions o;
      o.tokens = 96;
      const VerifyReport r = verify_spec(spec, o);
      EXPECT_TRUE(r.passed()) << format_report(r);
    }
  }
}

TEST(CpuBadShapes, PartialBlockScaleCoversOnlyItsElements) {
  // One [3][200] e4m3 tensor with 1x128 blocks: blocks of 128 and 72.
  LayerPlan plan;
  plan.layer = "t";
  Tensor data;
  data.id = 0;
  data.name = "t.a.fp8.row";
  data.type = ElemType::e4m3;
  data.dims = {Dim{"tokens", 3, 3}, Dim{"in", 200, 200}};
  data.scaling = Scaling::block_1x128;
  data.scale = 1;
  Tensor scale = data;
  scale.id = 1;
  scale.name = "t.a.fp8.row.scale_inv";
  scale.type = ElemType::fp32;
  scale.scaling = Scaling::none;
  scale.scale = -1;
  scale.dims = {Dim{"tokens", 3, 3}, Dim{"in", 2, 2}};
  plan.tensors = {data, scale};
  TensorStore store(plan);
  std::vector<float> v(600, 0.5f);
  for (int r = 0; r < 3; ++r) v[static_cast<std::size_t>(r * 200 + 10)] = 100.0f;  // block 0
  for (int r = 0; r < 3; ++r) v[static_cast<std::size_t>(r * 200 + 199)] = 2.0f;   // block 1
  quantize_to(store, 0, v, 1.0f, false);
  const auto dec = decode(store, 0, true);
  float inv[6];
  std::memcpy(inv, store.bytes(1).data(), sizeof inv);
  EXPECT_FLOAT_EQ(inv[1], 2.0f / 448.0f);  // amax 2 over the 72 real elements
  EXPECT_FLOAT_EQ(inv[0], 100.0f / 448.0f);
  EXPECT_FLOAT_EQ(dec[199], 2.0f);
  EXPECT_FLOAT_EQ(dec[10], 100.0f);
}

TEST(CpuNanPolicy, NanErrorFailsTheStepAndPropagateCarriesIt) {
  for (const std::string nan : {"error", "propagate"}) {
    const Spec spec =
        spec_from(layer_text("current { nan = " + nan + " }", "column", false, 2, 256, 512));
    PlanOptions po;
    po.ranks = 2;
    po.tokens = 64;
    const LayerPlan plan = plan_spec(spec, po).layers[0];
    auto data = std::vector<LayerData>{random_layer_data(spec.layers[0], 64, 3)};
    data[0].x[17] = std::numeric_limits<float>::quiet_NaN();
    if (nan == "error") {
      EXPECT_THROW(run_layer(spec.layers[0], plan, data), ExecutorError);
    } else {
      const auto r = run_layer(spec.layers[0], plan, data);
      EXPECT_TRUE(std::isnan(r[0][0].y[0]));  // row 0 of X holds the NaN
    }
  }
}

// --- the command -------------------------------------------------------------

struct ToolRun {
  int status = -1;
  std::string out;
};

// `env` prefixes the command, e.g. "FP8C_GLOO_MODULE=/x".
ToolRun run_tool(const std::string& args, const std::string& env = "") {
  ToolRun r;
  const std::string cmd = env + " " + ::fp8c::testing::built_path(FP8C_TOOL) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (std::size_t n = fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("fp8c_cpu_" + name);
  std::ofstream(path) << text;
  return path.string();
}

TEST(CpuVerifyCommand, InlineSpecPassesWithATable) {
  const std::string f =
      write_temp("ok.fp8", layer_text("mxfp8", "row", true, 4, 256, 128, "bias = true"));
  const ToolRun r = run_tool("verify " + f + " --tokens 512 --steps 2 --backend inproc");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("dw: 4 ranks vs 1 rank"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max abs"), std::string::npos);
  EXPECT_NE(r.out.find("all 13 checks passed"), std::string::npos) << r.out;
  const ToolRun j = run_tool("verify " + f + " --tokens 256 --json --ranks 2");
  EXPECT_EQ(j.status, 0) << j.out;
  EXPECT_NE(j.out.find("\"passed\": true"), std::string::npos) << j.out;
}

TEST(CpuVerifyCommand, ErrorsAndUsage) {
  const std::string f =
      write_temp("sp.fp8", layer_text("current", "column", true, 4, 256, 512, "bias = true"));
  ToolRun r = run_tool("verify " + f + " --tokens 250");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("not divisible by 4 ranks"), std::string::npos) << r.out;
  EXPECT_EQ(run_tool("verify " + f + " --bogus").status, 2);
  EXPECT_EQ(run_tool("verify " + f + " --backend nccl").status, 2);
  // --gemm picks the GPU's GEMM backend: a word it knows, and only on the GPU.
  r = run_tool("verify " + f + " --device gpu --gemm cutlass");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--gemm must be auto, cublaslt or generated"), std::string::npos) << r.out;
  r = run_tool("verify " + f + " --gemm generated");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--gemm needs --device gpu"), std::string::npos) << r.out;
  // plan --lowered --gemm shows the layer's GEMMs on the backend asked for.
  r = run_tool("plan " + f + " --tokens 256 --lowered --gemm generated");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("gemm fprop on generated"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("on cublaslt"), std::string::npos) << r.out;
  r = run_tool("plan " + f + " --tokens 256 --lowered");
  EXPECT_NE(r.out.find("gemm fprop on cublaslt"), std::string::npos) << r.out;
  EXPECT_EQ(run_tool("plan " + f + " --gemm generated").status, 2);
  EXPECT_EQ(run_tool("verify").status, 2);
  EXPECT_EQ(run_tool("verify " + f + " --layer nope").status, 1);
  r = run_tool("verify " + ::fp8c::testing::examples_dir() + "/gpt_mlp.fp8 --tokens 16");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
}

// gloo is a module, libfp8c_gloo.so (collectives/gloo_communicator.hpp):
// build/tools/fp8c finds it at build/lib as an installed bin/fp8c does at
// lib/, takes FP8C_GLOO_MODULE over any search, and without it runs the
// ranks in-process with a note, or fails when gloo was asked for.
TEST(CpuGlooModule, ToolFindsTheModuleRelativeToItself) {
  const std::string f = write_temp("gloo.fp8", layer_text("current", "row", false, 2, 128, 64));
  const ToolRun r = run_tool("verify " + f + " --tokens 32", "env -u FP8C_GLOO_MODULE");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("note:"), std::string::npos) << r.out;
  const ToolRun named =
      run_tool("verify " + f + " --tokens 32 --backend gloo",
               "FP8C_GLOO_MODULE=" + ::fp8c::testing::built_path(FP8C_GLOO_MODULE_FILE));
  EXPECT_EQ(named.status, 0) << named.out;
}

TEST(CpuGlooModule, WithoutTheModuleVerifyRunsInProcessUnlessGlooWasAskedFor) {
  const std::string f = write_temp("gloo.fp8", layer_text("current", "row", false, 2, 128, 64));
  const std::string missing = "/nonexistent/fp8c/libfp8c_gloo.so";
  const std::string env = "FP8C_GLOO_MODULE=" + missing;
  ToolRun r = run_tool("verify " + f + " --tokens 32", env);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("note: running the ranks in-process"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(missing + ": "), std::string::npos) << r.out;  // where, and why
  EXPECT_NE(r.out.find("checks passed"), std::string::npos) << r.out;

  r = run_tool("verify " + f + " --tokens 32 --backend gloo", env);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("the gloo backend is unavailable: cannot load its module libfp8c_gloo.so"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(missing + ": "), std::string::npos) << r.out;

  // Not a shared object: dlopen's own reason is passed on ("invalid ELF
  // header"; long enough not to be "file too short").
  const std::string bogus = write_temp("libfp8c_gloo.so", std::string(256, '#') + "\n");
  r = run_tool("verify " + f + " --tokens 32 --backend gloo", "FP8C_GLOO_MODULE=" + bogus);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(bogus + ": "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ELF"), std::string::npos) << r.out;
}

// Every example whose layers are small enough to run on CPU in seconds
// (at most 2^24 weights per layer; at 16 tokens).
TEST(CpuVerifyCommand, SmallExamplesPass) {
  int run = 0;
  for (const auto& e : std::filesystem::directory_iterator(::fp8c::testing::examples_dir())) {
    if (e.path().extension() != ".fp8") continue;
    const Spec spec = load_spec(e.path().string());
    const bool small = std::all_of(spec.layers.begin(), spec.layers.end(),
                                   [](const Layer& l) { return l.in * l.out <= (1u << 24); });
    if (!small) continue;
    ++run;
    const ToolRun r = run_tool("verify " + e.path().string() + " --tokens 16 --steps 2");
    EXPECT_EQ(r.status, 0) << e.path() << "\n" << r.out;
  }
  EXPECT_GE(run, 3);
}

}  // namespace
}  // namespace fp8c::cpu
