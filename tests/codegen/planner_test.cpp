// The planner: what is gathered, quantized and transposed, per recipe and
// layout, the bytes it communicates, and the rules that hold at every
// --ranks / --tokens.
#include <gtest/gtest.h>

#include <optional>

#include "codegen/plan/plan_check.hpp"
#include "codegen/plan/planner.hpp"
#include "fp8c/dsl.hpp"
#include "tests/codegen/plan_test_support.hpp"

namespace fp8c {
namespace {

using testing::all_steps_of;
using testing::collective_signature;
using testing::delayed_keys;
using testing::gemm_of;
using testing::one_layer;
using testing::producer_of;
using testing::steps_of;

constexpr RecipeKind kFp8Recipes[] = {RecipeKind::delayed, RecipeKind::current,
                                      RecipeKind::blockwise, RecipeKind::mxfp8};

Plan plan_at(const Spec& spec, std::uint32_t ranks, std::uint64_t tokens) {
  PlanOptions o;
  o.ranks = ranks;
  o.tokens = tokens;
  return plan_spec(spec, o);
}

Spec spec_text(const std::string& text) {
  const SourceFile file{"test.fp8", text};
  CheckResult r = check_source(file);
  if (!r.spec) throw std::runtime_error("spec does not check:\n" + text);
  return *r.spec;
}

// An `output = fp8` the plan cannot honour is noted with the same reason
// `fp8c check` gives, and the output stays high precision.
TEST(Planner, UnhonouredFp8OutputIsNotedWithItsReason) {
  for (const char* consumer : {"current { }", "blockwise { }"}) {
    SCOPED_TRACE(consumer);
    const Spec spec = spec_text(
        std::string("layer a = linear { in = 256  out = 512  output = fp8  recipe = delayed { } }\n"
                    "layer b = linear { input = a  out = 256  recipe = ") +
        consumer + " }\n");
    const Plan plan = plan_at(spec, 1, 256);
    const LayerPlan& a = plan.layers[0];
    EXPECT_EQ(a.io.y_fp8, kNoTensor);
    ASSERT_NE(a.io.y, kNoTensor);
    EXPECT_EQ(a.tensor(a.io.y).type, DType::bf16);
    const std::string reason = fp8_output_not_honoured(spec, spec.layers[0]);
    EXPECT_NE(reason.find("consumer 'b' uses recipe"), std::string::npos) << reason;
    bool noted = false;
    for (const std::string& n : a.notes)
      noted = noted ||
              n == "output = fp8 is not honoured: " + reason + "; the output is written in bf16";
    EXPECT_TRUE(noted);
  }
  // Honoured: a delayed consumer.
  const Spec chained = spec_text(
      "layer a = linear { in = 256  out = 512  output = fp8  recipe = delayed { } }\n"
      "layer b = linear { input = a  out = 256  recipe = delayed { } }\n");
  EXPECT_EQ(fp8_output_not_honoured(chained, chained.layers[0]), "");
  EXPECT_NE(plan_at(chained, 1, 256).layers[0].io.y_fp8, kNoTensor);
}

// TransformerEngine #530: column + sequence parallel wgrad reads X gathered
// along tokens. Whatever the recipe, the X operand must be gathered along
// tokens and be either contiguous (permuted, transposed from a rowwise
// gather, or quantized after a high-precision gather) or segmented along
// tokens with wgrad reading a segmented K.
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
        const GemmStep& wgrad = gemm_of(l, GemmRole::wgrad);
        const Tensor& x = l.tensor(wgrad.b);
        EXPECT_EQ(x.usage, Usage::columnwise);
        EXPECT_EQ(x.dims[0].name, "tokens");
        EXPECT_EQ(x.dims[0].local, tokens);  // gathered: the whole K
        const Step* made = producer_of(l, x.id);
        ASSERT_NE(made, nullptr);
        if (x.segmented) {
          EXPECT_EQ(*x.segmented, 0);
          EXPECT_TRUE(wgrad.segmented_k);
          EXPECT_EQ(made->kind(), StepKind::all_gather);
        } else if (const auto* q = made->as<QuantizeStep>()) {
          // Quantized from the whole X: its source is a high-precision gather.
          const Step* gather = producer_of(l, q->src);
          ASSERT_NE(gather, nullptr);
          EXPECT_EQ(gather->kind(), StepKind::all_gather);
          EXPECT_FALSE(l.tensor(q->src).is_fp8());
        } else {
          EXPECT_TRUE(made->kind() == StepKind::permute || made->kind() == StepKind::transpose)
              << to_string(made->kind());
          if (made->kind() == StepKind::transpose) {
            EXPECT_TRUE(recipe == RecipeKind::delayed || recipe == RecipeKind::current);
          }
          const Step* gather = producer_of(l, made->inputs().at(0));
          ASSERT_NE(gather, nullptr);
          ASSERT_EQ(gather->kind(), StepKind::all_gather);
          EXPECT_EQ(gather->as<AllGatherStep>()->dim, 0);
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
        EXPECT_EQ(l.tensor(s->as<TransposeStep>()->in).scaling, Scaling::per_tensor) << file;
  }
}

// TransformerEngine PR #1963: with save_input = original, backward
// quantizes X columnwise only; debug statistics change no collective.
TEST(Planner, SaveOriginalQuantizesOnlyColumnwiseAndStatsKeepCollectives) {
  Debug stats;
  stats.stats = true;
  for (RecipeKind recipe : kFp8Recipes)
    for (auto mode : {ParallelMode::column, ParallelMode::row})
      for (bool sp : {false, true})
        for (std::uint32_t ranks : {1u, 2u, 8u}) {
          SCOPED_TRACE(std::string(to_string(recipe)) + " " + std::string(to_string(mode)) +
                       (sp ? " sp " : " ") + std::to_string(ranks));
          const Plan with =
              plan_spec(one_layer(recipe, mode, ranks, sp, SaveInput::original, stats));
          const Plan without = plan_spec(one_layer(recipe, mode, ranks, sp, SaveInput::original));
          const LayerPlan& l = with.layers[0];
          int backward_x = 0;
          for (const Step* s : steps_of(l.backward, StepKind::quantize)) {
            const auto* q = s->as<QuantizeStep>();
            if (l.tensor(q->src).quantity != Quantity::x) continue;
            ++backward_x;
            EXPECT_EQ(q->rowwise, kNoTensor) << "backward quantizes X rowwise";
            EXPECT_NE(q->columnwise, kNoTensor);
            EXPECT_TRUE(q->stats);
          }
          EXPECT_EQ(backward_x, 1);
          EXPECT_EQ(collective_signature(with.layers[0]), collective_signature(without.layers[0]));
        }
}

// A debug fallback GEMM reads the original high-precision operands at every
// tensor-parallel size, and creates no FP8 state a one-rank run lacks.
TEST(Planner, FallbackGemmsReadHighPrecisionAndStateIsRankIndependent) {
  const std::vector<std::vector<GemmKind>> fallbacks = {
      {GemmKind::fprop},
      {GemmKind::dgrad},
      {GemmKind::wgrad},
      {GemmKind::dgrad, GemmKind::wgrad},
      {GemmKind::fprop, GemmKind::dgrad, GemmKind::wgrad}};
  for (RecipeKind recipe : kFp8Recipes)
    for (auto mode : {ParallelMode::column, ParallelMode::row})
      for (bool sp : {false, true})
        for (auto save : {SaveInput::fp8, SaveInput::original})
          for (const auto& fb : fallbacks) {
            Debug d;
            d.fallback = fb;
            SCOPED_TRACE(std::string(to_string(recipe)) + " " + std::string(to_string(mode)) +
                         (sp ? " sp" : "") + " fallback " + std::to_string(fb.size()));
            const Spec spec = one_layer(recipe, mode, 4, sp, save, d);
            const Plan one = plan_at(spec, 1, 4096);
            for (std::uint32_t ranks : {2u, 4u}) {
              const Plan many = plan_at(spec, ranks, 4096);
              const LayerPlan& l = many.layers[0];
              EXPECT_TRUE(check_plan(many).empty());
              EXPECT_EQ(delayed_keys(l), delayed_keys(one.layers[0]));
              for (GemmKind g : fb) {
                const GemmStep& gemm = gemm_of(l, static_cast<GemmRole>(g));
                EXPECT_TRUE(gemm.high_precision);
                for (int id : {gemm.a, gemm.b}) {
                  // High precision all the way from the layer's inputs:
                  // itself an input, or gathered / dact'ed from one.
                  int t = id;
                  while (const Step* p = producer_of(l, t)) {
                    ASSERT_TRUE(p->kind() == StepKind::all_gather ||
                                p->kind() == StepKind::grad_epilogue)
                        << to_string(p->kind()) << " makes " << l.tensor(t).name;
                    t = p->inputs().at(0);
                  }
                  EXPECT_FALSE(l.tensor(t).is_fp8());
                  EXPECT_TRUE(l.tensor(t).external) << l.tensor(t).name;
                }
              }
            }
          }
}

// Block formats gathered along tokens: where tokens per rank would cut the
// columnwise blocks, the high-precision tensor is gathered and quantized
// after the gather (TE's rule), and a note names it.
TEST(Planner, CutBlocksOnAGatherAreQuantizedAfterAHighPrecisionGather) {
  for (RecipeKind recipe : {RecipeKind::blockwise, RecipeKind::mxfp8})
    for (auto mode : {ParallelMode::column, ParallelMode::row}) {
      SCOPED_TRACE(std::string(to_string(recipe)) + " " + std::string(to_string(mode)));
      const Spec spec = one_layer(recipe, mode, 4, true);
      const std::uint64_t block = recipe == RecipeKind::mxfp8 ? 32 : 128;
      for (std::uint64_t tokens : {4 * block, 4 * block * 3 + 4 * 16}) {
        const bool cut = (tokens / 4) % block != 0;
        const Plan p = plan_at(spec, 4, tokens);
        const LayerPlan& l = p.layers[0];
        const GemmStep& wgrad = gemm_of(l, GemmRole::wgrad);
        const Tensor& gathered_operand = l.tensor(mode == ParallelMode::column ? wgrad.b : wgrad.a);
        bool hp_gather = false;
        for (const Step* s : all_steps_of(l, StepKind::all_gather)) {
          const Tensor& in = l.tensor(s->as<AllGatherStep>()->in);
          if (!in.is_fp8()) hp_gather = true;
          // Never a gather of blocks a rank's share cuts.
          if (in.block_scaled() && in.usage == Usage::columnwise) {
            EXPECT_EQ(in.dims[0].local % block, 0u) << in.name;
          }
        }
        EXPECT_EQ(hp_gather, cut) << tokens;
        bool noted = false;
        for (const auto& n : l.notes)
          if (n.find("gathered in") != std::string::npos) noted = true;
        EXPECT_EQ(noted, cut);
        if (cut) {
          EXPECT_FALSE(gathered_operand.segmented);
        }
      }
    }
}

// Rowwise 1x128 blocks run along the feature dim: tokens per rank never cut
// them, and no note says so.
TEST(Planner, NotesNameExactlyTheTensorsWithCutBlocks) {
  // in = 192 over 2 ranks: 96 per rank cuts X's and W's blocks along `in`.
  const Spec row = spec_text(
      "layer p = linear { in = 192 out = 256 recipe = blockwise "
      "layout = { tensor_parallel = 2 sequence_parallel = true } row }\n");
  const Plan p = plan_at(row, 2, 48);
  std::vector<std::string> cut;
  for (const auto& n : p.layers[0].notes)
    if (n.find("are cut") != std::string::npos) cut.push_back(n.substr(0, n.find(':')));
  std::sort(cut.begin(), cut.end());
  EXPECT_EQ(cut, (std::vector<std::string>{"p.w.fp8.col", "p.w.fp8.row", "p.x.fp8.row"}));
  for (const auto& n : p.layers[0].notes)
    EXPECT_EQ(n.find("tokens per rank is not a multiple"), std::string::npos) << n;
  // The same at 256 = 2 x 128: nothing is cut.
  const Plan q = plan_at(spec_text("layer p = linear { in = 256 out = 256 recipe = blockwise "
                                   "layout = { tensor_parallel = 2 } row }\n"),
                         2, 48);
  for (const auto& n : q.layers[0].notes) EXPECT_EQ(n.find("are cut"), std::string::npos) << n;
}

// A one-rank plan on an N-rank block grid restarts blocks where N shards
// would cut them, and its block-scale tensors hold one scale per block.
TEST(Planner, OneRankPlanOnAnotherBlockGrid) {
  const Spec row = spec_text(
      "layer p = linear { in = 192 out = 256 recipe = blockwise "
      "layout = { tensor_parallel = 2 } row }\n");
  PlanOptions o;
  o.ranks = 1;
  o.tokens = 32;
  o.block_grid["p"] = 2;
  const Plan p = plan_spec(row, o);
  const LayerPlan& l = p.layers[0];
  const Tensor& xr = *l.find("p.x.fp8.row");
  EXPECT_EQ(xr.block_segments[1], 2u);  // along `in`
  EXPECT_EQ(xr.block_segments[0], 1u);
  EXPECT_EQ(l.tensor(xr.scale).dims[1].local, 2u);  // 2 x ceil(96 / 128)
  const Tensor& w = *l.find("p.w.fp8.row");
  EXPECT_EQ(w.block_segments[1], 2u);
  const Tensor& dyr = *l.find("p.dy.fp8.row");  // `out` is not split in a row layer
  EXPECT_EQ(dyr.block_segments, (std::array<std::uint32_t, 2>{1, 1}));
  o.ranks = 2;
  EXPECT_THROW(plan_spec(row, o), PlanError);
}

// The size rules `fp8c check` enforces hold at every --ranks / --tokens, or
// the error names the dim.
TEST(Planner, Fp8GemmSizesAreCheckedAtEveryRanksAndTokens) {
  const Spec spec = spec_text(
      "layer p = linear { in = 256 out = 256 recipe = delayed layout = { tensor_parallel = 2 } "
      "column }\n");
  for (std::uint64_t tokens : {1ull, 7ull, 24ull}) {
    try {
      plan_at(spec, 2, tokens);
      ADD_FAILURE() << tokens << " tokens planned";
    } catch (const PlanError& e) {
      EXPECT_NE(std::string(e.what()).find("wgrad GEMM contracts over tokens = " +
                                           std::to_string(tokens)),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(plan_at(spec, 2, 32));
  // out = 256 over 32 ranks: 8 per rank.
  try {
    plan_at(spec, 32, 32);
    ADD_FAILURE();
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("out = 8 per rank"), std::string::npos) << e.what();
  }
  // MXFP8: 32.
  const Spec mx = spec_text("layer p = linear { in = 256 out = 256 recipe = mxfp8 }\n");
  EXPECT_THROW(plan_at(mx, 1, 48), PlanError);
  EXPECT_NO_THROW(plan_at(mx, 1, 64));
  // A wgrad fallback takes any token count.
  const Spec fb = spec_text(
      "layer p = linear { in = 256 out = 256 recipe = delayed debug = { fallback = wgrad } }\n");
  EXPECT_NO_THROW(plan_at(fb, 1, 7));
}

// Specs the checker rejects (an FP8 input with nothing in high precision to
// fall back on) are a PlanError from the planner too, never a crash.
TEST(Planner, Fp8InputWithoutHighPrecisionIsAnErrorNotACrash) {
  Spec spec = spec_text(
      "recipe d = delayed\n"
      "layer a = linear { in = 128 out = 256 output = fp8 recipe = d layout = { tensor_parallel = "
      "2 } column }\n"
      "layer b = linear { input = a out = 128 recipe = d layout = { tensor_parallel = 2 } row }\n");
  spec.layers[1].debug.fallback = {GemmKind::fprop};
  EXPECT_THROW(plan_spec(spec), PlanError);
  spec.layers[1].debug.fallback = {};
  spec.layers[1].save_input = SaveInput::original;
  EXPECT_THROW(plan_spec(spec), PlanError);
  spec.layers[1].save_input = SaveInput::fp8;
  EXPECT_NO_THROW(plan_spec(spec));
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
        for (const Step* s : all_steps_of(l, StepKind::amax_all_reduce)) {
          const Tensor& in = l.tensor(s->as<AmaxAllReduceStep>()->in);
          if (in.quantity == Quantity::w && in.form == Form::amax) weight_reduced = true;
        }
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
  EXPECT_EQ(gathers[0]->bytes_per_rank(), 7ull * 8192 * 8192 / 8);  // FP8 X [8192, 8192]
  EXPECT_EQ(fc1.tensor(gathers[0]->as<AllGatherStep>()->in).type, ElemType::e4m3);
  const auto rs = steps_of(fc1.backward, StepKind::reduce_scatter);
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0]->bytes_per_rank(), 7ull * 8192 * 8192 * 2 / 8);  // bf16 dX [8192, 8192]
  const LayerPlan& fc2 = *plan.find("fc2");
  const auto fwd_rs = steps_of(fc2.forward, StepKind::reduce_scatter);
  ASSERT_EQ(fwd_rs.size(), 1u);
  EXPECT_EQ(fwd_rs[0]->bytes_per_rank(), 7ull * 8192 * 8192 * 2 / 8);  // bf16 Y [8192, 8192]
  const auto dy_gather = steps_of(fc2.backward, StepKind::all_gather);
  ASSERT_EQ(dy_gather.size(), 1u);  // rowwise only: the columnwise copy is a transpose
  EXPECT_EQ(dy_gather[0]->bytes_per_rank(), 7ull * 8192 * 8192 / 8);
  EXPECT_EQ(fc2.tensor(dy_gather[0]->as<AllGatherStep>()->in).type, ElemType::e5m2);
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
  spec.layers[0].output_fp8 = true;
  spec.layers[1].recipe.kind = RecipeKind::delayed;
  const Plan plan = plan_spec(spec);
  const LayerPlan& fc1 = *plan.find("fc1");
  const LayerPlan& fc2 = *plan.find("fc2");
  ASSERT_NE(fc1.io.y_fp8, kNoTensor);
  EXPECT_EQ(fc1.io.y, kNoTensor);
  ASSERT_NE(fc2.io.x_fp8, kNoTensor);
  EXPECT_EQ(fc2.io.x, kNoTensor);
  EXPECT_TRUE(fc2.tensor(fc2.io.x_fp8).external);
  for (const Step* q : all_steps_of(fc2, StepKind::quantize))
    EXPECT_NE(fc2.tensor(q->as<QuantizeStep>()->src).quantity, Quantity::x)
        << "the input is not re-quantized";
  EXPECT_EQ(delayed_keys(fc2).front(), "x");
}

// A chained producer whose GEMM writes the FP8 output (column parallel, or
// one rank) writes its columnwise copy beside it, and the consumer's wgrad
// reads that instead of a transpose of its own; a row-parallel producer
// (an epilogue step after the reduce-scatter writes the output) and a
// consumer that gathers its input keep the consumer's transpose.
TEST(Planner, ChainedProducerWritesTheConsumersColumnwiseInput) {
  const auto steps_of = [](const LayerPlan& l, StepKind k) { return all_steps_of(l, k).size(); };
  const auto check = [&](const std::string& text, std::uint32_t ranks, bool fused) {
    SCOPED_TRACE(text + " at " + std::to_string(ranks) + " ranks");
    PlanOptions o;
    o.ranks = ranks;
    const Plan plan = plan_spec(spec_text(text), o);
    const LayerPlan& a = plan.layers[0];
    const LayerPlan& b = plan.layers[1];
    ASSERT_NE(a.io.y_fp8, kNoTensor);
    ASSERT_NE(b.io.x_fp8, kNoTensor);
    const GemmStep& wgrad = gemm_of(b, GemmRole::wgrad);
    if (!fused) {
      EXPECT_EQ(a.io.y_fp8_col, kNoTensor);
      EXPECT_EQ(b.io.x_fp8_col, kNoTensor);
      EXPECT_EQ(steps_of(b, StepKind::transpose), 1u);
      return;
    }
    ASSERT_NE(a.io.y_fp8_col, kNoTensor);
    ASSERT_NE(b.io.x_fp8_col, kNoTensor);
    const GemmStep& fprop = gemm_of(a, GemmRole::fprop);
    EXPECT_EQ(fprop.out, a.io.y_fp8);
    EXPECT_EQ(fprop.epilogue.out_columnwise, a.io.y_fp8_col);
    const Tensor& out = a.tensor(a.io.y_fp8_col);
    const Tensor& in = b.tensor(b.io.x_fp8_col);
    EXPECT_EQ(out.usage, Usage::columnwise);
    EXPECT_EQ(in.usage, Usage::columnwise);
    EXPECT_FALSE(out.external);
    EXPECT_TRUE(in.external);
    EXPECT_EQ(out.scale, a.tensor(a.io.y_fp8).scale);
    EXPECT_EQ(in.scale, b.tensor(b.io.x_fp8).scale);
    EXPECT_EQ(in.dims[0].local, out.dims[0].local);
    EXPECT_EQ(in.dims[1].local, out.dims[1].local);
    EXPECT_EQ(steps_of(b, StepKind::transpose), 0u) << "the consumer transposes nothing";
    EXPECT_EQ(wgrad.b, b.io.x_fp8_col);
  };
  const std::string column_row =
      "recipe d = delayed\n"
      "layer a = linear { in = 128 out = 256 output = fp8 recipe = d layout = { tensor_parallel "
      "= 2 } column }\n"
      "layer b = linear { input = a out = 128 recipe = d layout = { tensor_parallel = 2 } row }\n";
  const std::string row_column =
      "recipe d = delayed\n"
      "layer a = linear { in = 128 out = 256 output = fp8 recipe = d layout = { tensor_parallel "
      "= 2 sequence_parallel = true } row }\n"
      "layer b = linear { input = a out = 128 recipe = d layout = { tensor_parallel = 2 "
      "sequence_parallel = true } column }\n";
  check(column_row, 2, true);
  check(column_row, 1, true);
  check(row_column, 2, false);
  check(row_column, 1, true);
  // Two one-rank column layers forced onto 2 ranks: each rank's output
  // (half of `out`) is not its consumer's input (all of `in`), so nothing
  // is handed over as it is, and the plan stays valid.
  const std::string one_rank =
      "recipe d = delayed\n"
      "layer a = linear { in = 128 out = 256 output = fp8 recipe = d }\n"
      "layer b = linear { input = a out = 128 recipe = d }\n";
  check(one_rank, 1, true);
  check(one_rank, 2, false);
}

// The checker holds the columnwise hand-over to its form: the GEMM's copy
// is the FP8 output transposed (per-tensor, same type, scale and dims), an
// epilogue step cannot write one, and some layer reads it.
TEST(PlanCheck, ChainedColumnwiseCopyIsChecked) {
  const auto chain = [](const std::string& producer_layout, const std::string& consumer_layout) {
    PlanOptions o;
    o.ranks = 2;
    return plan_spec(spec_text("recipe d = delayed\nlayer a = linear { in = 128 out = 256 "
                               "output = fp8 recipe = d layout = " +
                               producer_layout +
                               " }\nlayer b = linear { input = a out = 128 recipe = d "
                               "layout = " +
                               consumer_layout + " }\n"),
                     o);
  };
  const auto mentions = [](const std::vector<std::string>& errors, const std::string& what) {
    for (const auto& e : errors)
      if (e.find(what) != std::string::npos) return true;
    return false;
  };
  const Plan good = chain("{ tensor_parallel = 2 } column", "{ tensor_parallel = 2 } row");
  ASSERT_TRUE(check_plan(good).empty());
  Plan bad = good;
  LayerPlan& a = bad.layers[0];
  a.tensors[static_cast<std::size_t>(a.io.y_fp8_col)].usage = Usage::rowwise;
  EXPECT_TRUE(mentions(check_plan(bad), "a.y.fp8.col is not the columnwise copy of a.y.fp8.row"));
  bad = good;
  bad.layers[1].io.x_fp8_col = kNoTensor;
  EXPECT_TRUE(mentions(check_plan(bad), "which no layer reads as its columnwise FP8 input"));
  // A row producer's output comes from an epilogue step after the
  // reduce-scatter, which writes no columnwise copy.
  bad = chain("{ tensor_parallel = 2  sequence_parallel = true } row",
              "{ tensor_parallel = 2  sequence_parallel = true } column");
  LayerPlan& row = bad.layers[0];
  for (Step& s : row.forward)
    if (auto* e = s.as<EpilogueStep>()) {
      Tensor c = row.tensor(e->out);
      c.name = "a.y.fp8.col";
      c.usage = Usage::columnwise;
      c.id = static_cast<int>(row.tensors.size());
      row.tensors.push_back(c);
      e->epilogue.out_columnwise = c.id;
    }
  EXPECT_TRUE(
      mentions(check_plan(bad), "an epilogue step writes no columnwise copy (a.y.fp8.col)"));
}

// A chained consumer's dgrad hands its producer FP8 dz (chain_hands_dz):
// its epilogue applies the producer's act' to the producer's z, sums the
// producer's dbias, and stores dz with the producer's gradient scale, amax
// and columnwise copy; the producer quantizes nothing in backward and reads
// those tensors as they are handed over (shapes and types match). Where
// the rule does not hold, the producer keeps its dy and quantize.
TEST(Planner, ChainedConsumerHandsItsProducerFp8Dz) {
  const auto chain = [](const std::string& producer, const std::string& consumer) {
    return "recipe d = delayed\nrecipe c = current\n"
           "layer a = linear { in = 128 out = 256 bias = true activation = gelu output = fp8 " +
           producer + " }\nlayer b = linear { input = a out = 128 recipe = d " + consumer + " }\n";
  };
  const auto check = [&](const std::string& text, std::uint32_t ranks, bool handed,
                         std::optional<std::uint32_t> grid = std::nullopt) {
    SCOPED_TRACE(text + " at " + std::to_string(ranks) + " ranks");
    PlanOptions o;
    o.ranks = ranks;
    if (grid) o.block_grid = {{"a", *grid}, {"b", *grid}};
    const Plan plan = plan_spec(spec_text(text), o);
    EXPECT_TRUE(check_plan(plan).empty());
    const LayerPlan& a = plan.layers[0];
    const LayerPlan& b = plan.layers[1];
    const GemmStep& dgrad = gemm_of(b, GemmRole::dgrad);
    if (!handed) {
      EXPECT_FALSE(b.tensor(b.io.dx).is_fp8());
      EXPECT_EQ(b.io.dx_fp8_col, kNoTensor);
      EXPECT_EQ(a.io.dy_fp8_col, kNoTensor);
      EXPECT_FALSE(a.tensor(a.io.dy).is_fp8());
      EXPECT_EQ(dgrad.epilogue.dact, Activation::none);
      EXPECT_EQ(all_steps_of(a, StepKind::quantize).size() > 2, true) << "a quantizes its dz";
      return;
    }
    // The consumer's side.
    EXPECT_EQ(dgrad.out, b.io.dx);
    const Tensor& dz = b.tensor(b.io.dx);
    EXPECT_TRUE(dz.is_fp8());
    EXPECT_EQ(dz.type, ElemType::e5m2);  // the producer's backward format
    EXPECT_EQ(dgrad.epilogue.dact, Activation::gelu);
    EXPECT_EQ(dgrad.epilogue.dact_input, b.io.dx_dact_input);
    EXPECT_TRUE(b.tensor(b.io.dx_dact_input).external);
    EXPECT_EQ(dgrad.epilogue.dbias, b.io.dx_db);
    EXPECT_EQ(dgrad.epilogue.out_scale, b.io.dx_scale);
    EXPECT_EQ(dgrad.epilogue.out_amax, b.io.dx_amax);
    EXPECT_EQ(dgrad.epilogue.out_columnwise, b.io.dx_fp8_col);
    EXPECT_EQ(dz.scale, b.io.dx_scale);
    // The producer's side: no dy in high precision, no quantize of it.
    const Tensor& dy = a.tensor(a.io.dy);
    EXPECT_TRUE(dy.is_fp8() && dy.external);
    EXPECT_TRUE(a.tensor(a.io.dy_fp8_col).external);
    EXPECT_TRUE(a.tensor(a.io.dy_db).external);
    for (const Step* st : all_steps_of(a, StepKind::quantize))
      EXPECT_NE(a.tensor(st->as<QuantizeStep>()->src).quantity, Quantity::dy);
    EXPECT_EQ(all_steps_of(a, StepKind::grad_epilogue).size(), 0u);
    EXPECT_EQ(gemm_of(a, GemmRole::dgrad).a, a.io.dy);
    EXPECT_EQ(gemm_of(a, GemmRole::wgrad).a, a.io.dy_fp8_col);
    // Its delayed dz entry reads the handed amax (reduced where sharded).
    bool amax_read = false;
    for (const DelayedTensor& d : a.delayed)
      if (d.quantity == Quantity::dz) amax_read = d.amax == a.io.dy_amax;
    EXPECT_TRUE(amax_read);
    // What is handed over fits as it is, on every rank.
    const auto same = [](const Tensor& x, const Tensor& y) {
      return x.dims[0].local == y.dims[0].local && x.dims[1].local == y.dims[1].local &&
             x.type == y.type;
    };
    EXPECT_TRUE(same(dz, dy));
    EXPECT_TRUE(same(b.tensor(b.io.dx_fp8_col), a.tensor(a.io.dy_fp8_col)));
    EXPECT_TRUE(same(b.tensor(b.io.dx_db), a.tensor(a.io.dy_db)));
    EXPECT_TRUE(same(b.tensor(b.io.dx_dact_input), a.tensor(a.io.z)));
  };
  const std::string tp2_col = "recipe = d layout = { tensor_parallel = 2 } column";
  const std::string tp2_row = "layout = { tensor_parallel = 2 } row";
  check(chain("recipe = d", ""), 1, true);
  check(chain(tp2_col, tp2_row), 2, true);
  check(chain(tp2_col, tp2_row), 1, true);
  // The one-rank plan on a 2-rank grid decides as the 2-rank plan does.
  const std::string sp_row =
      "recipe = d layout = { tensor_parallel = 2 sequence_parallel = true } row";
  const std::string sp_col = "layout = { tensor_parallel = 2 sequence_parallel = true } column";
  check(chain(sp_row, sp_col), 2, false);  // the producer gathers its dz; the consumer sums dx
  check(chain(sp_row, sp_col), 1, true);
  check(chain(sp_row, sp_col), 1, false, 2);
  // A current-scaling producer: dz's scale comes from dz itself.
  check(chain("recipe = c", ""), 1, false);
  // A fallback GEMM reads dz in high precision.
  check(chain("recipe = d debug = { fallback = dgrad }", ""), 1, false);
  check(chain("recipe = d", "debug = { fallback = dgrad }"), 1, false);
  // Debug statistics of dz are recorded by the producer's quantize.
  check(chain("recipe = d debug = { stats = true }", ""), 1, false);
}

// A Spec made in code may hold any ElemType where the language allows only a
// subset; the planner refuses it, naming the value.
TEST(Planner, ElementTypesOutsideTheirSubsetAreRefused) {
  const Spec spec =
      spec_text("recipe d = delayed\nlayer a = linear { in = 128 out = 256 recipe = d }\n");
  Spec bad = spec;
  bad.layers[0].dtype = ElemType::e4m3;
  EXPECT_THROW(plan_spec(bad), std::invalid_argument);
  bad = spec;
  bad.layers[0].output_dtype = ElemType::fp64;
  EXPECT_THROW(plan_spec(bad), std::invalid_argument);
  bad = spec;
  bad.layers[0].recipe.backward = ElemType::bf16;
  try {
    plan_spec(bad);
    ADD_FAILURE() << "bf16 accepted as a backward format";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "layer 'a' backward format: bf16 is not an FP8 format (e4m3 or e5m2)");
  }
  EXPECT_NO_THROW(plan_spec(spec));
}

TEST(Planner, RecipeNoneHasNoFp8) {
  const Plan plan = plan_spec(testing::example("single_gpu_reference.fp8"));
  for (const auto& l : plan.layers)
    for (const auto& t : l.tensors) EXPECT_FALSE(t.is_fp8()) << t.name;
}

// Every step names its operands: the io fields and the typed operands agree
// with what the steps read and write.
TEST(Planner, IoNamesTheLayersTensors) {
  for (const auto& file : testing::example_files()) {
    PlanOptions o;
    o.tokens = 256;
    const Plan plan = plan_spec(testing::example(file), o);
    for (const auto& l : plan.layers) {
      SCOPED_TRACE(file + " " + l.layer);
      if (l.io.x != kNoTensor) {
        EXPECT_EQ(l.tensor(l.io.x).quantity, Quantity::x);
      }
      EXPECT_EQ(l.tensor(l.io.w).quantity, Quantity::w);
      EXPECT_EQ(l.tensor(l.io.dy).quantity, Quantity::dy);
      EXPECT_EQ(l.tensor(l.io.dx).quantity, Quantity::dx);
      EXPECT_EQ(l.tensor(l.io.dw).quantity, Quantity::dw);
      EXPECT_NE(producer_of(l, l.io.dx), nullptr);
      EXPECT_NE(producer_of(l, l.io.dw), nullptr);
      EXPECT_NE(producer_of(l, l.io.y != kNoTensor ? l.io.y : l.io.y_fp8), nullptr);
      if (l.io.db != kNoTensor) {
        EXPECT_NE(producer_of(l, l.io.db), nullptr);
      }
      for (const auto& d : l.delayed) {
        EXPECT_TRUE(l.tensor(d.scale).external);
        EXPECT_EQ(l.tensor(d.scale).quantity, d.quantity);
        ASSERT_NE(d.next_scale, kNoTensor);
        EXPECT_NE(producer_of(l, d.next_scale), nullptr);
      }
    }
  }
}

}  // namespace
}  // namespace fp8c
