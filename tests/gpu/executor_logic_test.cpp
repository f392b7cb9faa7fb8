// What the GPU executor runs, decided without a GPU by the lowering: which
// kernels a layer needs (with the fallbacks: a kernel after a GEMM that
// cannot apply relu/silu, dequantize kernels for block-scaled GEMM operands,
// an fp32-staged dact for block formats), and which layers it refuses up
// front, naming why. Always runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <variant>

#include <unistd.h>
#include "../cpu/cpu_test_support.hpp"

#include <cstdio>
#include <filesystem>
#include <set>

#include "api/session_plan.hpp"
#include "codegen/plan/planner.hpp"
#include "fp8c/dsl.hpp"
#include "runtime/gpu/rank_executor.hpp"
#include "tests/test_paths.hpp"

namespace fp8c::runtime {
namespace {

using cpu::testing::layer_text;
using cpu::testing::spec_from;

LoweredLayer kernels_of(const std::string& text, std::uint32_t ranks, std::uint64_t tokens) {
  const Spec spec = spec_from(text);
  PlanOptions o;
  o.ranks = ranks;
  o.tokens = tokens;
  const Plan plan = plan_spec(spec, o);
  return lower_for_gpu(spec.layers[0], plan.layers[0]);
}

template <typename K>
std::vector<K> all_of(const LoweredLayer& k) {
  std::vector<K> out;
  for (const auto& g : k.kernels)
    if (const auto* d = std::get_if<K>(&g.description)) out.push_back(*d);
  return out;
}

TEST(ExecutorLogic, EveryExampleAtItsRanksHasEveryKernelItNeeds) {
  for (const char* name : {"ada_delayed", "current_scaling_debug", "single_gpu_reference",
                           "blockwise_mlp", "mxfp8_proj", "gpt_mlp", "attention_out_then_mlp"}) {
    SCOPED_TRACE(name);
    const Spec spec = load_spec(::fp8c::testing::examples_dir() + "/" + name + ".fp8");
    PlanOptions o;
    o.tokens = 1024;
    const Plan plan = plan_spec(spec, o);
    for (const auto& lp : plan.layers) {
      LoweredLayer k;
      EXPECT_NO_THROW(k = lower_for_gpu(*spec.find_layer(lp.layer), lp)) << lp.layer;
      // One lowered step per plan step, each with what it runs.
      EXPECT_EQ(k.forward.size(), lp.forward.size());
      EXPECT_EQ(k.backward.size(), lp.backward.size());
      EXPECT_EQ(k.update.size(), lp.update.size());
      for (const auto* pass : {&k.forward, &k.backward, &k.update})
        for (const auto& step : *pass) EXPECT_FALSE(step.actions.empty());
      // No duplicates: the set is compiled once.
      for (std::size_t i = 0; i < k.kernels.size(); ++i)
        for (std::size_t j = i + 1; j < k.kernels.size(); ++j)
          EXPECT_FALSE(k.kernels[i] == k.kernels[j]) << k.kernels[i].name();
    }
  }
}

TEST(ExecutorLogic, ReluAndSiluGetAKernelAfterTheGemmGeluDoesNot) {
  for (const char* act : {"relu", "silu", "gelu"}) {
    SCOPED_TRACE(act);
    const auto k = kernels_of(
        layer_text("current", "column", false, 1, 256, 512, std::string("activation = ") + act), 1,
        256);
    const auto epilogues = all_of<EpilogueKernel>(k);
    const bool forward_act = std::any_of(epilogues.begin(), epilogues.end(), [](const auto& e) {
      return !e.backward && e.activation != Activation::none && !e.bias;
    });
    EXPECT_EQ(forward_act, std::string(act) != "gelu");
  }
}

TEST(ExecutorLogic, BlockScaledGemmsGetDequantizeKernelsInTheLayerDtype) {
  for (const char* recipe : {"blockwise", "mxfp8"}) {
    SCOPED_TRACE(recipe);
    const auto k = kernels_of(layer_text(recipe, "column", true, 2, 256, 512), 2, 512);
    const auto dq = all_of<DequantizeKernel>(k);
    ASSERT_FALSE(dq.empty());
    for (const auto& d : dq) EXPECT_EQ(d.output, ElemType::bf16);
  }
  EXPECT_TRUE(all_of<DequantizeKernel>(
                  kernels_of(layer_text("current", "column", true, 2, 256, 512), 2, 512))
                  .empty());
}

TEST(ExecutorLogic, BlockFormatsStageDactInFp32ThenQuantizeFromIt) {
  const auto k = kernels_of(
      layer_text("blockwise", "column", false, 1, 256, 512, "bias = true  activation = gelu"), 1,
      256);
  const auto epilogues = all_of<EpilogueKernel>(k);
  EXPECT_TRUE(std::any_of(epilogues.begin(), epilogues.end(), [](const auto& e) {
    return e.backward && e.output == ElemType::fp32 && e.dbias;
  }));
  const auto blocks = all_of<BlockQuantizeKernel>(k);
  EXPECT_TRUE(std::any_of(blocks.begin(), blocks.end(),
                          [](const auto& b) { return b.input == ElemType::fp32; }));
  const auto reduces = all_of<DbiasReduceKernel>(k);
  EXPECT_TRUE(std::any_of(reduces.begin(), reduces.end(),
                          [](const auto& r) { return r.output == ElemType::bf16; }));
}

TEST(ExecutorLogic, NanErrorWithoutAnAmaxIsRefusedNamingTheTensor) {
  const std::string text =
      "layer l = linear { in = 256  out = 512  recipe = blockwise { nan = error } }\n";
  try {
    kernels_of(text, 1, 256);
    ADD_FAILURE() << "refused nothing";
  } catch (const ExecutorError& e) {
    EXPECT_NE(std::string(e.what()).find("nan = error needs an amax of l.x"), std::string::npos)
        << e.what();
  }
}

TEST(ExecutorLogic, DelayedScaleUpdatesUseTheExecutorsStateStride) {
  const auto k =
      kernels_of(layer_text("delayed { history = 8 }", "row", true, 2, 512, 256), 2, 512);
  const auto updates = all_of<ScaleUpdateKernel>(k);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].scale_stride, DeviceLayerState::kScaleStride);
  EXPECT_EQ(updates[0].history_length, 8u);
}

// nan = error: the verdict watches every amax the layer computes (forward
// then backward), is agreed over the group when there is one, and the scale
// update reads it; other policies take no verdict.
TEST(ExecutorLogic, NanErrorLowersToADeviceVerdictThatGuardsTheScaleUpdate) {
  for (const std::uint32_t ranks : {1u, 2u, 3u}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    const auto k =
        kernels_of(layer_text("delayed { history = 8  nan = error }", "column", ranks > 1,
                              static_cast<int>(ranks), 384, 768, "bias = true  activation = gelu"),
                   ranks, 384);
    ASSERT_TRUE(k.nan_verdict.has_value());
    EXPECT_EQ(k.nan_verdict->all_reduce, ranks > 1);
    const Spec spec =
        spec_from(layer_text("delayed { history = 8  nan = error }", "column", ranks > 1,
                             static_cast<int>(ranks), 384, 768, "bias = true  activation = gelu"));
    PlanOptions o;
    o.ranks = ranks;
    o.tokens = 384;
    const Plan plan = plan_spec(spec, o);
    std::vector<std::string> sources;
    for (const auto& w : k.nan_verdict->watched)
      sources.push_back(plan.layers[0].tensor(w.source).name);
    EXPECT_EQ(sources, (std::vector<std::string>{"l.x", "l.w", "l.dy"}));
    const auto updates = all_of<ScaleUpdateKernel>(k);
    ASSERT_EQ(updates.size(), 1u);
    EXPECT_EQ(updates[0].guard, static_cast<int>(k.nan_verdict->watched.size()));
  }
  for (const char* recipe : {"delayed { history = 8 }", "current { nan = error }"}) {
    SCOPED_TRACE(recipe);
    const auto k = kernels_of(layer_text(recipe, "row", false, 2, 512, 256), 2, 512);
    const bool error = std::string(recipe).find("error") != std::string::npos;
    EXPECT_EQ(k.nan_verdict.has_value(), error);
    for (const auto& u : all_of<ScaleUpdateKernel>(k)) EXPECT_EQ(u.guard, 0);
  }
}

// `fp8c emit` (and so `fp8c compile`, which reads the same lowering) lists
// exactly the kernels a Session compiles, for every example: the tool is
// run as a user runs it, found beside this test binary in the build tree.
TEST(ExecutorLogic, Fp8cEmitListsTheKernelsASessionCompiles) {
  const std::filesystem::path self = std::filesystem::canonical("/proc/self/exe");
  const std::filesystem::path tool = self.parent_path().parent_path().parent_path() / "tools/fp8c";
  if (!std::filesystem::exists(tool)) GTEST_SKIP() << "no fp8c binary at " << tool;
  for (const char* name : {"ada_delayed", "current_scaling_debug", "single_gpu_reference",
                           "blockwise_mlp", "mxfp8_proj", "gpt_mlp", "attention_out_then_mlp"}) {
    SCOPED_TRACE(name);
    const std::string file = ::fp8c::testing::examples_dir() + "/" + name + ".fp8";
    SessionOptions o;
    o.tokens = 2048;
    std::set<std::string> session;
    for (const auto& k : plan_session(load_spec(file), o, 1).lowered.kernels)
      session.insert(k.kernel.name());
    const std::string command = tool.string() + " emit " + file + " --ranks 1 --tokens 2048";
    FILE* pipe = popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::set<std::string> emitted;
    char line[4096];
    const std::string head = "// ---- kernel ";
    while (std::fgets(line, sizeof line, pipe)) {
      std::string l(line);
      if (l.rfind(head, 0) != 0) continue;
      l = l.substr(head.size());
      while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
      emitted.insert(l);
    }
    EXPECT_EQ(pclose(pipe), 0) << command;
    EXPECT_FALSE(session.empty());
    EXPECT_EQ(emitted, session);
  }
}

}  // namespace
}  // namespace fp8c::runtime
