// The planner: what is gathered, quantized and transposed, per recipe and
// layout, and the bytes it communicates.
#include <gtest/gtest.h>

#include "codegen/plan/plan_check.hpp"
#include "codegen/plan/planner.hpp"
#include "tests/codegen/plan_test_support.hpp"

namespace fp8c {
namespace {

using testing::all_steps_of;
using testing::collective_signature;
using testing::one_layer;
using testing::steps_of;

constexpr RecipeKind kFp8Recipes[] = {RecipeKind::delayed, RecipeKind::current,
                                      RecipeKind::blockwise, RecipeKind::mxfp8};

const Step& wgrad_of(const LayerPlan& l) {
  for (const auto& s : l.backward)
    if (s.kind == StepKind::gemm && s.role == GemmRole::wgrad) return s;
  throw std::runtime_error("no wgrad");
}

// The step that produces tensor `id`, or nullptr.
const Step* producer_of(const LayerPlan& l, int id) {
  for (const auto* pass : {&l.forward, &l.backward, &l.update})
    for (const auto& s : *pass)
      for (int o : s.outputs)
        if (o == id) return &s;
  return nullptr;
}

// TransformerEngine #530: column + sequence parallel wgrad reads X gathered
// along tokens. Whatever the recipe, the X operand must be gathered along
// tokens and be either contiguous (permuted, or transposed from a rowwise
// gather) or segmented along tokens with wgrad reading a segmented K.
TEST(Planner, SeedColumnSequenceParallelWgradGathersXCorrectly) {
  for (RecipeKind recipe : kFp8Recipes) {
    for (std::uint32_t ranks : {2u, 4u, 8u}) {
      for (std::uint64_t tokens : {8192ull, 8000ull}) {
        SCOPED_TRACE(std::string(to_string(recipe)) + " ranks " + std::to_string(ranks) +
                     " tokens " + std::to_string(tokens));
        PlanOptions o;
        o.tokens = tokens;
        const Plan plan = plan_spec(one_layer(recipe, ParallelMode::column, ranks, true), o);
        const LayerPlan& l = plan.layers.at(0);
        const Step& wgrad = wgrad_of(l);
        const Tensor& x = l.tensor(wgrad.inputs.at(1));
        EXPECT_EQ(x.usage, Usage::columnwise);
        EXPECT_EQ(x.dims[0].name, "tokens");
        EXPECT_EQ(x.dims[0].local, tokens);  // gathered: the whole K
        const Step* made = producer_of(l, x.id);
        ASSERT_NE(made, nullptr);
        if (x.segmented) {
          EXPECT_EQ(*x.segmented, 0);
          EXPECT_TRUE(wgrad.segmented_k);
          EXPECT_EQ(made->kind, StepKind::all_gather);
        } else {
          EXPECT_TRUE(made->kind == StepKind::permute || made->kind == StepKind::transpose)
              << to_string(made->kind);
          if (made->kind == StepKind::transpose) {
            EXPECT_TRUE(recipe == RecipeKind::delayed || recipe == RecipeKind::current);
          }
          const Tensor& before = l.tensor(made->inputs.at(0));
          const Step* gather = producer_of(l, before.id);
          ASSERT_NE(gather, nullptr);
          EXPECT_EQ(gather->kind, StepKind::all_gather);
          EXPECT_EQ(gather->dim, 0);
        }
        EXPECT_TRUE(check_plan(plan).empty());
      }
    }
  }
}

TEST(Planner, BlockAndMxRecipesNeverTranspose) {
  for (RecipeKind recipe : {RecipeKind::blockwise, RecipeKind::mxfp8})
    for (auto mode : {ParallelMode::column, ParallelMode::row})
      for (bool sp : {false, true})
        for (std::uint32_t ranks : {1u, 2u, 4u, 8u})
          for (auto save : {SaveInput::fp8, SaveInput::original}) {
            const Plan plan = plan_spec(one_layer(recipe, mode, ranks, sp, save));
            EXPECT_TRUE(all_steps_of(plan.layers[0], StepKind::transpose).empty());
          }
  for (const auto& file : testing::example_files()) {
    const Plan plan = plan_spec(testing::example(file));
    for (const auto& l : plan.layers)
      for (const Step* s : all_steps_of(l, StepKind::transpose))
        EXPECT_EQ(l.tensor(s->inputs[0]).scaling, Scaling::per_tensor) << file;
  }
}

// TransformerEngine PR #1963: with save_input = original and debugging on,
// backward quantizes X columnwise only, and the collectives are exactly the
// ones of the plan without debugging.
TEST(Planner, SaveOriginalWithDebugQuantizesOnlyColumnwiseAndKeepsCollectives) {
  Debug debug;
  debug.stats = true;
  debug.fallback = {GemmKind::wgrad};
  for (RecipeKind recipe : kFp8Recipes)
    for (auto mode : {ParallelMode::column, ParallelMode::row})
      for (bool sp : {false, true})
        for (std::uint32_t ranks : {1u, 2u, 8u}) {
          SCOPED_TRACE(std::string(to_string(recipe)) + " " + std::string(to_string(mode)) +
                       (sp ? " sp " : " ") + std::to_string(ranks));
          const Plan with =
              plan_spec(one_layer(recipe, mode, ranks, sp, SaveInput::original, debug));
          const Plan without = plan_spec(one_layer(recipe, mode, ranks, sp, SaveInput::original));
          for (const Plan* p : {&with, &without}) {
            const LayerPlan& l = p->layers[0];
            for (const Step* q : steps_of(l.backward, StepKind::quantize)) {
              const Tensor& src = l.tensor(q->inputs[0]);
              if (src.name != "fc.x") continue;
              EXPECT_FALSE(q->rowwise) << "backward quantizes X rowwise";
              EXPECT_TRUE(q->columnwise);
            }
          }
          EXPECT_EQ(collective_signature(with.layers[0]), collective_signature(without.layers[0]));
        }
  // The example this case comes from.
  const Plan plan = plan_spec(testing::example("current_scaling_debug.fp8"));
  const Plan no_debug = [] {
    Spec s = testing::example("current_scaling_debug.fp8");
    for (auto& l : s.layers) l.debug = {};
    return plan_spec(s);
  }();
  EXPECT_EQ(collective_signature(plan.layers[0]), collective_signature(no_debug.layers[0]));
  int backward_x_quantizes = 0;
  for (const Step* q : steps_of(plan.layers[0].backward, StepKind::quantize))
    if (plan.layers[0].tensor(q->inputs[0]).name == "proj.x") {
      ++backward_x_quantizes;
      EXPECT_FALSE(q->rowwise);
      EXPECT_TRUE(q->stats);
    }
  EXPECT_EQ(backward_x_quantizes, 1);
}

TEST(Planner, AmaxReductionsForShardedPerTensorTensorsOnlyWithSeveralRanks) {
  for (RecipeKind recipe : {RecipeKind::delayed, RecipeKind::current})
    for (auto mode : {ParallelMode::column, ParallelMode::row})
      for (bool sp : {false, true}) {
        const Plan one = plan_spec(one_layer(recipe, mode, 1, sp));
        EXPECT_TRUE(all_steps_of(one.layers[0], StepKind::amax_all_reduce).empty());
        const Plan four = plan_spec(one_layer(recipe, mode, 4, sp));
        const LayerPlan& l = four.layers[0];
        // The weight is sharded on more than one rank: its amax is reduced.
        bool weight_reduced = false;
        for (const Step* s : all_steps_of(l, StepKind::amax_all_reduce))
          if (l.tensor(s->inputs[0]).name == "fc.w.amax") weight_reduced = true;
        EXPECT_TRUE(weight_reduced) << to_string(recipe) << " " << to_string(mode);
      }
  for (RecipeKind recipe : {RecipeKind::blockwise, RecipeKind::mxfp8}) {
    const Plan p = plan_spec(one_layer(recipe, ParallelMode::column, 8, true));
    EXPECT_TRUE(all_steps_of(p.layers[0], StepKind::amax_all_reduce).empty());
  }
}

// Bytes received per rank by a ring collective: all-gather (R-1)/R of the
// gathered tensor, reduce-scatter (R-1)/R of the input, all-reduce twice that.
TEST(Planner, GptMlpBytesMatchHandComputedValues) {
  const Plan plan = plan_spec(testing::example("gpt_mlp.fp8"));  // 8 ranks, 8192 tokens
  const LayerPlan& fc1 = *plan.find("fc1");
  const auto gathers = steps_of(fc1.forward, StepKind::all_gather);
  ASSERT_EQ(gathers.size(), 1u);
  EXPECT_EQ(gathers[0]->bytes_per_rank, 7ull * 8192 * 8192 / 8);  // FP8 X [8192, 8192]
  EXPECT_EQ(fc1.tensor(gathers[0]->inputs[0]).type, ElemType::e4m3);
  const auto rs = steps_of(fc1.backward, StepKind::reduce_scatter);
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0]->bytes_per_rank, 7ull * 8192 * 8192 * 2 / 8);  // bf16 dX [8192, 8192]
  const LayerPlan& fc2 = *plan.find("fc2");
  const auto fwd_rs = steps_of(fc2.forward, StepKind::reduce_scatter);
  ASSERT_EQ(fwd_rs.size(), 1u);
  EXPECT_EQ(fwd_rs[0]->bytes_per_rank, 7ull * 8192 * 8192 * 2 / 8);  // bf16 Y [8192, 8192]
  const auto dy_gather = steps_of(fc2.backward, StepKind::all_gather);
  ASSERT_EQ(dy_gather.size(), 1u);  // rowwise only: the columnwise copy is a transpose
  EXPECT_EQ(dy_gather[0]->bytes_per_rank, 7ull * 8192 * 8192 / 8);
  EXPECT_EQ(fc2.tensor(dy_gather[0]->inputs[0]).type, ElemType::e5m2);
}

TEST(Planner, EveryExamplePlansAndChecksCleanForOneToEightRanks) {
  for (const auto& file : testing::example_files()) {
    const Spec spec = testing::example(file);
    EXPECT_TRUE(check_plan(plan_spec(spec)).empty()) << file;
    for (std::uint32_t ranks : {1u, 2u, 4u, 8u}) {
      bool divides = true;
      for (const auto& l : spec.layers)
        if ((l.mode == ParallelMode::column ? l.out : l.in) % ranks != 0) divides = false;
      PlanOptions o;
      o.ranks = ranks;
      if (!divides) {
        EXPECT_THROW(plan_spec(spec, o), PlanError) << file;
        continue;
      }
      Plan p;
      ASSERT_NO_THROW(p = plan_spec(spec, o)) << file << " ranks " << ranks;
      EXPECT_TRUE(check_plan(p).empty()) << file << " ranks " << ranks;
      for (const auto& l : p.layers) {
        EXPECT_EQ(l.ranks, ranks);
        if (ranks == 1) {
          EXPECT_TRUE(all_steps_of(l, StepKind::all_gather).empty());
        }
      }
    }
  }
}

TEST(Planner, RanksThatDoNotDivideAreAnError) {
  PlanOptions o;
  o.ranks = 3;
  EXPECT_THROW(plan_spec(testing::example("gpt_mlp.fp8"), o), PlanError);
  o.ranks = 8;
  o.tokens = 100;  // sequence parallel: tokens must divide too
  EXPECT_THROW(plan_spec(testing::example("gpt_mlp.fp8"), o), PlanError);
}

TEST(Planner, NoQuantizedUsageIsUnused) {
  for (RecipeKind recipe : kFp8Recipes)
    for (auto mode : {ParallelMode::column, ParallelMode::row})
      for (bool sp : {false, true})
        for (auto save : {SaveInput::fp8, SaveInput::original})
          for (GemmKind fb : {GemmKind::fprop, GemmKind::dgrad, GemmKind::wgrad}) {
            Debug d;
            d.fallback = {fb};
            const Plan p = plan_spec(one_layer(recipe, mode, 4, sp, save, d));
            EXPECT_TRUE(check_plan(p).empty());  // includes the unused-usage rule
          }
}

TEST(Planner, DelayedConsumerTakesChainedFp8Output) {
  Spec spec = testing::example("gpt_mlp.fp8");
  spec.layers[1].recipe.kind = RecipeKind::delayed;
  const Plan plan = plan_spec(spec);
  const LayerPlan& fc1 = *plan.find("fc1");
  const LayerPlan& fc2 = *plan.find("fc2");
  ASSERT_NE(fc1.find("fc1.y.fp8.row"), nullptr);
  ASSERT_NE(fc2.find("fc2.x.fp8.row"), nullptr);
  EXPECT_TRUE(fc2.find("fc2.x.fp8.row")->external);
  for (const Step* q : all_steps_of(fc2, StepKind::quantize))
    EXPECT_NE(fc2.tensor(q->inputs[0]).name, "fc2.x");  // the input is not re-quantized
}

TEST(Planner, RecipeNoneHasNoFp8) {
  const Plan plan = plan_spec(testing::example("single_gpu_reference.fp8"));
  for (const auto& l : plan.layers)
    for (const auto& t : l.tensors) EXPECT_FALSE(t.is_fp8()) << t.name;
}

}  // namespace
}  // namespace fp8c
