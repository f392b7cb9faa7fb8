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
    const auto* p = it->as<PermuteStep>();
    if (!p || p->in != g) continue;
    const int permuted = p->out;
    b.erase(it);
    for (auto& s : b) s.replace_input(permuted, g);
    break;
  }
  for (auto& s : b)
    if (auto* gemm = s.as<GemmStep>()) gemm->segmented_k = false;
  return plan;
}

TEST(PlanCheck, GatherOfColumnwiseWithoutSegmentsIsRejected) {
  // Segmented-K (8192) and permute (8000) plans; block formats gather FP8
  // columnwise data only where tokens per rank are whole blocks.
  for (RecipeKind recipe : {RecipeKind::current, RecipeKind::blockwise, RecipeKind::mxfp8})
    for (std::uint64_t tokens : {8192ull, 8000ull}) {
      if (recipe != RecipeKind::current && tokens != 8192) continue;
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
  for (auto& s : plan.layers[0].backward)
    if (auto* g = s.as<GemmStep>()) g->segmented_k = false;  // keep the mark
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
  TransposeStep t;
  t.in = row;
  t.out = col.id;
  l.backward.insert(l.backward.begin(), Step{t});
  const auto errors = check_plan(plan);
  EXPECT_TRUE(any_mentions(errors, "transposes fc.w.fp8.row", "128x128"));
}

TEST(PlanCheck, WrongUsageForTnGemmIsRejected) {
  Plan plan = plan_spec(one_layer(RecipeKind::current, ParallelMode::column, 1, false));
  LayerPlan& l = plan.layers[0];
  for (auto& s : l.backward)
    if (auto* g = s.as<GemmStep>(); g && g->role == GemmRole::dgrad)
      g->b = l.find("fc.w.fp8.row")->id;
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
    auto* q = s.as<QuantizeStep>();
    if (!q || l.tensor(q->src).name != "fc.x") continue;
    Tensor row = l.tensor(q->columnwise);
    row.name = "fc.x.fp8.row.backward";
    row.usage = Usage::rowwise;
    row.id = static_cast<int>(l.tensors.size());
    l.tensors.push_back(row);
    q->rowwise = row.id;
  }
  EXPECT_TRUE(any_mentions(check_plan(plan), "fc.x.fp8.row.backward", "no step reads"));
}

TEST(PlanCheck, MissingAmaxReductionIsRejected) {
  for (RecipeKind recipe : {RecipeKind::current, RecipeKind::delayed}) {
    Plan plan = plan_spec(one_layer(recipe, ParallelMode::column, 4, true));
    LayerPlan& l = plan.layers[0];
    for (auto* pass : {&l.forward, &l.backward, &l.update}) {
      for (auto it = pass->begin(); it != pass->end();) {
        const auto* r = it->as<AmaxAllReduceStep>();
        if (!r) {
          ++it;
          continue;
        }
        const int from = r->in, to = r->out;
        it = pass->erase(it);
        for (auto* p2 : {&l.forward, &l.backward, &l.update})
          for (auto& s : *p2) s.replace_input(to, from);
        for (auto& d : l.delayed)
          if (d.amax_reduced == to) d.amax_reduced = from;
      }
    }
    EXPECT_TRUE(any_mentions(check_plan(plan), "not reduced", "4 ranks")) << to_string(recipe);
  }
}

}  // namespace
}  // namespace fp8c
