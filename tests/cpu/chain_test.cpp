// Producer -> consumer chains (`input =`) run end to end on CPU ranks: the
// consumer reads the producer's output (FP8 with the consumer's delayed
// scale when chained in FP8), the producer's gradient is the consumer's dX.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu_test_support.hpp"
#include "codegen/plan/planner.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/cpu/verify.hpp"

namespace fp8c::cpu {
namespace {

using testing::spec_from;

std::string chain_text(const std::string& recipe1, const std::string& recipe2,
                       const std::string& mode1, const std::string& mode2, bool fp8_output) {
  return "layout tp = {\n  tensor_parallel = 4\n  sequence_parallel = true\n}\n"
         "layer a = linear {\n  in = 256  out = 512  bias = true  activation = gelu\n" +
         std::string(fp8_output ? "  output = fp8\n" : "") + "  recipe = " + recipe1 +
         "\n  layout = tp " + mode1 +
         "\n}\nlayer b = linear {\n  in = 512  out = 256  bias = true\n  input = a\n  recipe = " +
         recipe2 + "\n  layout = tp " + mode2 + "\n}\n";
}

// A row of the chain's own run (checks of the chain end in " [a->b]").
bool has_check(const VerifyReport& r, const std::string& layer, const std::string& check) {
  for (const auto& c : r.checks)
    if (c.layer == layer && c.check == check + " [a->b]") return true;
  return false;
}

TEST(CpuChain, ColumnThenRowChainsMatchOneRankAndFloat64) {
  for (const auto& [r1, r2, fp8] : std::vector<std::tuple<std::string, std::string, bool>>{
           {"delayed { history = 4 }", "delayed { history = 4 }", true},  // FP8 hand-over
           {"current", "current", true},  // output stays bf16: consumer is not delayed
           {"blockwise", "mxfp8", false},
           {"none", "none", false}}) {
    SCOPED_TRACE(r1 + " -> " + r2);
    const Spec spec = spec_from(chain_text(r1, r2, "column", "row", fp8));
    VerifyOptions o;
    o.tokens = 512;
    o.steps = 2;
    const VerifyReport r = verify_spec(spec, o);
    EXPECT_TRUE(r.passed()) << format_report(r);
    EXPECT_TRUE(has_check(r, "b", "y: 4 ranks vs 1 rank"));
    EXPECT_TRUE(has_check(r, "a", "dw: 4 ranks vs float64"));
    EXPECT_TRUE(has_check(r, "a", "dx: 4 ranks vs 1 rank"));
  }
}

// The attention-output -> MLP shape: a row layer reduce-scatters its output
// over tokens, the column layer gathers it (in FP8 when chained).
TEST(CpuChain, RowThenColumnChainsMatchOneRankAndFloat64) {
  for (const std::string recipe : {"delayed { history = 4 }", "blockwise"}) {
    SCOPED_TRACE(recipe);
    const Spec spec = spec_from(chain_text(recipe, recipe, "row", "column", recipe != "blockwise"));
    VerifyOptions o;
    o.tokens = 512;
    const VerifyReport r = verify_spec(spec, o);
    EXPECT_TRUE(r.passed()) << format_report(r);
    EXPECT_TRUE(r.notes.empty());
    EXPECT_TRUE(has_check(r, "a", "dx: 4 ranks vs 1 rank"));
    EXPECT_TRUE(has_check(r, "b", "y: 4 ranks vs 1 rank"));
  }
}

// Backward, a delayed column producer into a row consumer: the consumer's
// dgrad hands the producer FP8 dz (chain_hands_dz). On every rank the
// producer reads exactly what the consumer's epilogue wrote (dz and its
// columnwise copy, the bias gradient, the amax into its history), dz is
// the FP8 of the consumer's dx times act'(z) with the producer's scale, and
// the whole chain still matches one rank and float64 (the test above).
TEST(CpuChain, AConsumersDgradHandsItsProducerFp8Dz) {
  const Spec spec = spec_from(chain_text("delayed { history = 4 }", "delayed { history = 4 }",
                                         "column", "row", true));
  PlanOptions po;
  po.tokens = 256;
  const Plan plan = plan_spec(spec, po);
  const LayerPlan& a = plan.layers[0];
  const LayerPlan& b = plan.layers[1];
  ASSERT_NE(a.io.dy_fp8_col, kNoTensor);
  ASSERT_NE(b.io.dx_fp8_col, kNoTensor);
  ExecutorOptions eo;
  eo.backend = collectives::Backend::kInProcess;
  for (const LayerPlan* p : {&a, &b})
    for (int id : {p->io.dy, p->io.dy_fp8_col, p->io.dy_db, p->io.dx, p->io.dx_fp8_col,
                   p->io.dx_db, p->io.dx_dact_input, p->io.z})
      if (id != kNoTensor) eo.capture.push_back(p->tensor(id).name);
  std::vector<ChainData> data;
  for (int s = 0; s < 3; ++s)
    data.push_back({random_layer_data(spec.layers[0], 256, 10 + s),
                    random_layer_data(spec.layers[1], 256, 20 + s)});
  const auto runs = run_chain(spec.layers[0], a, spec.layers[1], b, data, eo);
  ASSERT_EQ(runs.size(), 4u);
  for (std::size_t s = 0; s < data.size(); ++s) {
    float amax = 0.0f;
    for (std::size_t r = 0; r < runs.size(); ++r) {
      SCOPED_TRACE("step " + std::to_string(s) + " rank " + std::to_string(r));
      const RankStepResult& pa = runs[r][s].first;
      const RankStepResult& pb = runs[r][s].second;
      const auto bytes = [](const RankStepResult& x, const LayerPlan& p, int id) {
        return x.captured.at(p.tensor(id).name).bytes;
      };
      EXPECT_EQ(bytes(pa, a, a.io.dy), bytes(pb, b, b.io.dx));
      EXPECT_EQ(bytes(pa, a, a.io.dy_fp8_col), bytes(pb, b, b.io.dx_fp8_col));
      EXPECT_EQ(bytes(pa, a, a.io.dy_db), bytes(pb, b, b.io.dx_db));
      EXPECT_EQ(bytes(pb, b, b.io.dx_dact_input), bytes(pa, a, a.io.z));
      // dz in the producer's backward format (its values against float64:
      // verify, above), not all zero.
      const auto& dz = pb.captured.at(b.tensor(b.io.dx).name).logical;
      double norm = 0;
      for (float v : dz) {
        norm += double(v) * v;
        amax = std::max(amax, std::fabs(v));
      }
      EXPECT_GT(norm, 0.0);
      EXPECT_EQ(a.tensor(a.io.dy).type, ElemType::e5m2);
    }
    // The producer's dz history holds the amax over the ranks' shards of
    // the dz the consumer computed (before its FP8 rounding: within a step).
    const auto& h = runs[0][s].first.state.delayed.at("dz").history;
    ASSERT_FALSE(h.empty());
    EXPECT_NEAR(h[0], amax, 0.25 * amax);
    EXPECT_GT(h[0], 0.0f);
    EXPECT_GT(runs[0][s].first.state.delayed.at("dz").scale, 0.0f);
  }
}

// nan = error on the producer: a NaN in the dz its consumer handed over
// fails the producer's step by name before its state changes.
TEST(CpuChain, ANanInAHandedDzFailsTheProducersStep) {
  const Spec spec = spec_from(chain_text("delayed { history = 4  nan = error }",
                                         "delayed { history = 4 }", "column", "row", true));
  PlanOptions po;
  po.tokens = 64;
  po.ranks = 1;
  const Plan plan = plan_spec(spec, po);
  ASSERT_NE(plan.layers[0].io.dy_fp8_col, kNoTensor);
  std::vector<ChainData> data = {{random_layer_data(spec.layers[0], 64, 1),
                                  random_layer_data(spec.layers[1], 64, 2)}};
  data[0].second.dy[5] = NAN;
  ExecutorOptions eo;
  eo.backend = collectives::Backend::kInProcess;
  try {
    run_chain(spec.layers[0], plan.layers[0], spec.layers[1], plan.layers[1], data, eo);
    ADD_FAILURE() << "a NaN dz was accepted";
  } catch (const ExecutorError& e) {
    EXPECT_NE(std::string(e.what()).find("NaN in a.dz.fp8.row (recipe nan = error)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fp8c::cpu
