// The plan checker rejects hand-broken plans with messages that say what is
// wrong and what it would cost.
#include <gtest/gtest.h>

#include <algorithm>

#include "codegen/plan/plan_check.hpp"
#include "codegen/plan/planner.hpp"
#include "tests/codegen/plan_test_support.hpp"

namespace fp8c {
namespace {

using testing::one_layer;

bool any_mentions(const std::vector<std::string>& errors, const std::string& a,
                  const std::string& b = {}) {
  return std::any_of(errors.begin(), errors.end(), [&](const std::string& e) {
    return e.find(a) != std::string::npos && e.find(b) != std::string::npos;
  });
}

// Takes the gathered columnwise X of a column + sequence parallel layer and
// drops what makes it safe: the permute (its consumers read the gathered
// tensor directly), the segmented mark and wgrad's segmented K.
Plan drop_segment_handling(Plan plan) {
  LayerPlan& l = plan.layers[0];
  const Tensor* gathered = l.find("fc.x.fp8.col.gathered");
  if (!gathered) throw std::runtime_error("no gathered columnwise X");
  const int g = gathered->id;
  l.tensors[static_cast<std::size_t>(g)].segmented.reset();
  auto& b = l.backward;
  for (auto it = b.begin(); it != b.end(); ++it) {
    if (it->kind != StepKind::permute || it->inputs[0] != g) continue;
    const int permuted = it->outputs[0];
    b.erase(it);
    for (auto& s : b)
      for (int& in : s.inputs)
        if (in == permuted) in = g;
    break;
  }
  for (auto& s : b) s.segmented_k = false;
  return plan;
}

TEST(PlanCheck, GatherOfColumnwiseWithoutSegmentsIsRejected) {
  for (RecipeKind recipe : {RecipeKind::current, RecipeKind::blockwise, RecipeKind::mxfp8})
    for (std::uint64_t tokens : {8192ull, 8000ull}) {  // segmented-K and permute plans
      PlanOptions o;
      o.tokens = tokens;
      const Plan good = plan_spec(one_layer(recipe, ParallelMode::column, 8, true), o);
      ASSERT_TRUE(check_plan(good).empty());
      const auto errors = check_plan(drop_segment_handling(good));
      ASSERT_FALSE(errors.empty()) << to_string(recipe);
      EXPECT_TRUE(any_mentions(errors, "gathered dim 'tokens'", "fc.x.fp8.col")) << errors.front();
      EXPECT_TRUE(any_mentions(errors, "scrambled")) << errors.front();
    }
}

TEST(PlanCheck, SegmentedTensorReadAsContiguousIsRejected) {
  PlanOptions o;
  o.tokens = 8192;
  Plan plan = plan_spec(one_layer(RecipeKind::mxfp8, ParallelMode::column, 4, true), o);
  for (auto& s : plan.layers[0].backward) s.segmented_k = false;  // keep the mark
  const auto errors = check_plan(plan);
  EXPECT_TRUE(any_mentions(errors, "segmented", "scrambled"));
}

TEST(PlanCheck, TransposeOfBlockScaledDataIsRejected) {
  Plan plan = plan_spec(one_layer(RecipeKind::blockwise, ParallelMode::row, 1, false));
  LayerPlan& l = plan.layers[0];
  // Make dgrad's W operand a transpose of the rowwise weight.
  const int row = l.find("fc.w.fp8.row")->id;
  Tensor col = l.tensor(row);
  col.name = "fc.w.fp8.col.transposed";
  col.usage = Usage::columnwise;
  col.id = static_cast<int>(l.tensors.size());
  l.tensors.push_back(col);
  Step t;
  t.kind = StepKind::transpose;
  t.inputs = {row};
  t.outputs = {col.id};
  l.backward.insert(l.backward.begin(), t);
  const auto errors = check_plan(plan);
  EXPECT_TRUE(any_mentions(errors, "transposes fc.w.fp8.row", "128x128"));
}

TEST(PlanCheck, WrongUsageForTnGemmIsRejected) {
  Plan plan = plan_spec(one_layer(RecipeKind::current, ParallelMode::column, 1, false));
  LayerPlan& l = plan.layers[0];
  for (auto& s : l.backward)
    if (s.kind == StepKind::gemm && s.role == GemmRole::dgrad)
      s.inputs[1] = l.find("fc.w.fp8.row")->id;
  const auto errors = check_plan(plan);
  EXPECT_TRUE(any_mentions(errors, "fc.w.fp8.row", "columnwise")) << errors.size();
}

TEST(PlanCheck, UseBeforeProduceIsRejected) {
  Plan plan = plan_spec(one_layer(RecipeKind::delayed, ParallelMode::column, 2, true));
  std::swap(plan.layers[0].forward.front(), plan.layers[0].forward.back());
  EXPECT_TRUE(any_mentions(check_plan(plan), "before any step produces it"));
}

TEST(PlanCheck, UnusedQuantizedUsageIsRejected) {
  Plan plan =
      plan_spec(one_layer(RecipeKind::current, ParallelMode::column, 2, true, SaveInput::original));
  LayerPlan& l = plan.layers[0];
  // Backward also quantizes X rowwise, which nothing reads (TE PR #1963).
  for (auto& s : l.backward) {
    if (s.kind != StepKind::quantize || l.tensor(s.inputs[0]).name != "fc.x") continue;
    Tensor row = l.tensor(s.outputs[0]);
    row.name = "fc.x.fp8.row.backward";
    row.usage = Usage::rowwise;
    row.id = static_cast<int>(l.tensors.size());
    l.tensors.push_back(row);
    s.rowwise = true;
    s.outputs.push_back(row.id);
  }
  EXPECT_TRUE(any_mentions(check_plan(plan), "fc.x.fp8.row.backward", "no step reads"));
}

TEST(PlanCheck, MissingAmaxReductionIsRejected) {
  for (RecipeKind recipe : {RecipeKind::current, RecipeKind::delayed}) {
    Plan plan = plan_spec(one_layer(recipe, ParallelMode::column, 4, true));
    LayerPlan& l = plan.layers[0];
    for (auto* pass : {&l.forward, &l.backward, &l.update}) {
      for (auto it = pass->begin(); it != pass->end();) {
        if (it->kind != StepKind::amax_all_reduce) {
          ++it;
          continue;
        }
        const int from = it->inputs[0], to = it->outputs[0];
        it = pass->erase(it);
        for (auto* p2 : {&l.forward, &l.backward, &l.update})
          for (auto& s : *p2)
            for (int& in : s.inputs)
              if (in == to) in = from;
      }
    }
    EXPECT_TRUE(any_mentions(check_plan(plan), "not reduced", "4 ranks")) << to_string(recipe);
  }
}

}  // namespace
}  // namespace fp8c
