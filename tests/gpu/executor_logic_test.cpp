// What the GPU executor runs, decided without a GPU by the lowering: which
// kernels a layer needs (with the fallbacks: a kernel after a GEMM that
// cannot apply relu/silu, block scales re-laid out for cuBLASLt's
// block-scaled GEMM or dequantize kernels where it cannot read them, an
// fp32-staged dact for block formats), and which layers it refuses up
// front, naming why. Always runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <variant>

#include <unistd.h>
#include "../cpu/cpu_test_support.hpp"
#include "../runtime/compile_check.hpp"

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "api/session_plan.hpp"
#include "codegen/plan/planner.hpp"
#include "fp8c/dsl.hpp"
#include "runtime/gemm/cublaslt_requirements.hpp"
#include "runtime/gemm/generated_gemm.hpp"
#include "runtime/gpu/rank_executor.hpp"
#include "tests/test_paths.hpp"

namespace fp8c::runtime {
namespace {

using cpu::testing::layer_text;
using cpu::testing::spec_from;

// Lowered for an H100/H200 with cuBLASLt 12.9 or newer unless `options` say
// otherwise, on cuBLASLt (what most checks here are about) unless `backend`
// says otherwise.
LoweredLayer kernels_of(const std::string& text, std::uint32_t ranks, std::uint64_t tokens,
                        const LowerOptions& options = {},
                        GemmBackend backend = GemmBackend::cublaslt) {
  Spec spec = spec_from(text);
  spec.layers[0].gemm = backend;
  PlanOptions o;
  o.ranks = ranks;
  o.tokens = tokens;
  const Plan plan = plan_spec(spec, o);
  return lower_for_gpu(spec.layers[0], plan.layers[0], options);
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
      EXPECT_NO_THROW(k = lower_for_gpu(*spec.find_layer(lp.layer), lp, {})) << lp.layer;
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

std::vector<GemmCall> gemm_calls(const LoweredLayer& k) {
  std::vector<GemmCall> out;
  for (const auto* pass : {&k.forward, &k.backward})
    for (const auto& step : *pass)
      for (const auto& a : step.actions)
        if (const auto* g = std::get_if<GemmCall>(&a)) out.push_back(*g);
  return out;
}

bool has_note(const LoweredLayer& k, const std::string& part) {
  return std::any_of(k.notes.begin(), k.notes.end(),
                     [&](const std::string& n) { return n.find(part) != std::string::npos; });
}

// 1x128 / 128x128 operands go to cuBLASLt's block-scaled FP8 GEMM, the 1x128
// scales re-laid out K-block-major by the word transpose (one launch per
// operand with more than one K block, the segmented wgrad's per rank segment
// batched into it); nothing is dequantized.
TEST(ExecutorLogic, BlockScaledGemmsRunAsFp8GemmsOnHopper) {
  for (int ranks : {1, 2, 4}) {
    SCOPED_TRACE(ranks);
    const auto k =
        kernels_of(layer_text("blockwise", "column", true, ranks, 1024, 2048), ranks, 1024);
    const auto calls = gemm_calls(k);
    ASSERT_EQ(calls.size(), 3u);
    for (const auto& c : calls) EXPECT_EQ(c.operands, GemmCall::Operands::fp8) << to_string(c.role);
    EXPECT_TRUE(all_of<DequantizeKernel>(k).empty());
    EXPECT_EQ(k.staging.dequantized, 0u);
    const auto transposes = all_of<TransposeKernel>(k);
    ASSERT_EQ(transposes.size(), 1u);
    EXPECT_EQ(transposes[0].element_bytes, 4);
    EXPECT_GT(k.staging.block_scales, 0u);
    EXPECT_TRUE(has_note(k, "block-scaled FP8 GEMM"));
    // The segmented wgrad (ranks > 1, X gathered along tokens) keeps its
    // per-segment calls and re-lays out both operands.
    for (const auto& c : calls)
      if (c.role == GemmRole::wgrad) {
        EXPECT_EQ(c.segments, static_cast<std::uint32_t>(ranks));
      }
    int layouts = 0;
    for (const auto& step : k.backward)
      for (const auto& a : step.actions)
        if (const auto* l = std::get_if<KernelLaunch>(&a))
          layouts += l->role == LaunchRole::scale_layout_a || l->role == LaunchRole::scale_layout_b;
    EXPECT_EQ(layouts, 3);  // dgrad's dz; wgrad's dz and x
  }
}

// On cuBLASLt without the block-scaled GEMM (another GPU, an older
// cuBLASLt), and for MXFP8 always (Hopper's cuBLASLt has no 1x32 mode),
// operands are dequantized to the layer dtype, and the notes say why.
TEST(ExecutorLogic, BlockScaledGemmsDequantizeWhereTheGemmCannotReadThem) {
  LowerOptions none;
  none.block_scaled_gemm = false;
  none.no_block_scaled_gemm = "this GPU has no such GEMM (test)";
  const auto off = kernels_of(layer_text("blockwise", "column", true, 2, 256, 512), 2, 512, none);
  for (const auto& c : gemm_calls(off)) EXPECT_EQ(c.operands, GemmCall::Operands::dequantized);
  EXPECT_TRUE(has_note(off, "this GPU has no such GEMM (test)"));
  EXPECT_TRUE(all_of<TransposeKernel>(off).empty());
  const auto mx = kernels_of(layer_text("mxfp8", "column", true, 2, 256, 512), 2, 512);
  for (const auto& c : gemm_calls(mx)) EXPECT_EQ(c.operands, GemmCall::Operands::dequantized);
  EXPECT_TRUE(has_note(mx, "MXFP8"));
  for (const auto* k : {&off, &mx}) {
    const auto dq = all_of<DequantizeKernel>(*k);
    ASSERT_FALSE(dq.empty());
    for (const auto& d : dq) EXPECT_EQ(d.output, ElemType::bf16);
  }
  EXPECT_TRUE(all_of<DequantizeKernel>(
                  kernels_of(layer_text("current", "column", true, 2, 256, 512), 2, 512))
                  .empty());
  // A spec's target decides `fp8c plan --lowered`: Hopper has the GEMM, Blackwell not here.
  EXPECT_TRUE(lower_options_for(Target{90, true}).block_scaled_gemm);
  const LowerOptions blackwell = lower_options_for(Target{100, true});
  EXPECT_FALSE(blackwell.block_scaled_gemm);
  EXPECT_NE(blackwell.no_block_scaled_gemm.find("sm_100a"), std::string::npos)
      << blackwell.no_block_scaled_gemm;
}

// Shapes cuBLASLt's block modes do not take as fp8c lays the scales out fall
// back GEMM by GEMM, each with its reason.
TEST(ExecutorLogic, BlockScaledGemmsFallBackOnShapesTheGemmDoesNotTake) {
  const auto role_of = [](const LoweredLayer& k, GemmRole r) {
    for (const auto& c : gemm_calls(k))
      if (c.role == r) return c;
    throw std::runtime_error("no such GEMM");
  };
  // K = in = 320: not whole 128-blocks; dgrad contracts over out.
  const auto partial = kernels_of(layer_text("blockwise", "column", false, 1, 320, 512), 1, 256);
  EXPECT_EQ(role_of(partial, GemmRole::fprop).operands, GemmCall::Operands::dequantized);
  EXPECT_EQ(role_of(partial, GemmRole::dgrad).operands, GemmCall::Operands::fp8);
  EXPECT_TRUE(has_note(partial, "K = 320, not a multiple of 128"));
  // 640 / 128 = 5 K blocks of a 256-row 128x128 weight: cuBLASLt reads its
  // scales padded to 8, which the GEMM's call copies them into (not a fallback).
  const auto padded = kernels_of(layer_text("blockwise", "column", false, 1, 640, 256), 1, 256);
  const GemmCall padded_fprop = role_of(padded, GemmRole::fprop);
  EXPECT_EQ(padded_fprop.operands, GemmCall::Operands::fp8);
  EXPECT_TRUE(padded_fprop.pad_scales_b);
  EXPECT_FALSE(padded_fprop.pad_scales_a);
  EXPECT_TRUE(has_note(padded, "padded to 4 blocks"));
  EXPECT_GE(padded.staging.block_scales, 2u * 8 * 4);
  // 1056 tokens over 2 ranks: wgrad's K segments of 528 are not whole blocks.
  const auto segments = kernels_of(layer_text("blockwise", "column", true, 2, 512, 512), 2, 1056);
  EXPECT_EQ(role_of(segments, GemmRole::wgrad).operands, GemmCall::Operands::dequantized);
  EXPECT_EQ(role_of(segments, GemmRole::fprop).operands, GemmCall::Operands::fp8);
  // GELU is no epilogue of the block-scaled GEMM: the GEMM writes the
  // pre-activation, a kernel applies GELU.
  const auto gelu = kernels_of(
      layer_text("blockwise", "column", false, 1, 512, 512, "bias = true  activation = gelu"), 1,
      256);
  const GemmCall fprop = role_of(gelu, GemmRole::fprop);
  EXPECT_EQ(fprop.operands, GemmCall::Operands::fp8);
  EXPECT_TRUE(fprop.activation_after);
  EXPECT_EQ(fprop.activation, Activation::none);
  const auto epilogues = all_of<EpilogueKernel>(gelu);
  EXPECT_TRUE(std::any_of(epilogues.begin(), epilogues.end(), [](const auto& e) {
    return !e.backward && e.activation == Activation::gelu;
  }));
}

// gemm = auto moves to the generated GEMM exactly the block-scaled GEMMs
// cuBLASLt would dequantize (and says so), keeps the others on cuBLASLt,
// and on a target without the generated GEMM is cuBLASLt alone.
TEST(ExecutorLogic, AutoRunsWhatCublasLtWouldDequantizeOnTheGeneratedGemm) {
  const auto backend_of = [](const LoweredLayer& k, GemmRole r) {
    for (const auto& c : gemm_calls(k))
      if (c.role == r)
        return c.backend + (c.operands == GemmCall::Operands::fp8 ? "" : " dequantized");
    throw std::runtime_error("no such GEMM");
  };
  const std::string partial_k = layer_text("blockwise", "column", false, 1, 320, 512);
  const auto k = kernels_of(partial_k, 1, 256, {}, GemmBackend::automatic);
  EXPECT_EQ(backend_of(k, GemmRole::fprop), "generated");
  EXPECT_EQ(backend_of(k, GemmRole::dgrad), "cublaslt");
  EXPECT_EQ(backend_of(k, GemmRole::wgrad), "cublaslt");
  EXPECT_TRUE(has_note(k,
                       "fprop: the generated GEMM (gemm = auto), as cuBLASLt would dequantize: "
                       "l.x.fp8.row has K = 320, not a multiple of 128"));
  EXPECT_TRUE(all_of<DequantizeKernel>(k).empty());
  LowerOptions other_gpu;
  other_gpu.generated_gemm = false;
  other_gpu.no_generated_gemm = "not sm_90a (test)";
  const auto off = kernels_of(partial_k, 1, 256, other_gpu, GemmBackend::automatic);
  EXPECT_EQ(backend_of(off, GemmRole::fprop), "cublaslt dequantized");
  EXPECT_TRUE(off.unsupported.empty());
  // Per-tensor: e5m2 x e5m2 (a backward-format forward) is no cuBLASLt form.
  const std::string e5m2 =
      "recipe r = current { forward = e5m2 }\n"
      "layer l = linear { in = 256  out = 512  recipe = r }\n";
  const auto both = kernels_of(e5m2, 1, 256, {}, GemmBackend::automatic);
  EXPECT_EQ(backend_of(both, GemmRole::fprop), "generated");
  EXPECT_TRUE(has_note(both, "as cuBLASLt has no e5m2 x e5m2 GEMM"));
  const auto plain = kernels_of(layer_text("current", "column", true, 2, 256, 512), 2, 512, {},
                                GemmBackend::automatic);
  for (const auto& c : gemm_calls(plain)) EXPECT_EQ(c.backend, "cublaslt") << to_string(c.role);
}

// MXFP8 on the generated GEMM: each operand's E8M0 codes go K-block-major
// through the byte transpose (the kernel's faster form, docs/gemm.md), except
// in a GEMM read one K segment at a time, whose codes stay row-major.
TEST(ExecutorLogic, MxfpCodesGoKBlockMajorExceptInASegmentedGemm) {
  for (std::uint32_t ranks : {1u, 2u}) {
    SCOPED_TRACE(ranks);
    const auto k = kernels_of(layer_text("mxfp8", "column", true, ranks, 256, 512), ranks, 512, {},
                              GemmBackend::generated);
    const auto transposes = all_of<TransposeKernel>(k);
    ASSERT_EQ(transposes.size(), 1u);
    EXPECT_EQ(transposes[0].element_bytes, 1);
    EXPECT_GT(k.staging.block_scales, 0u);
    std::map<GemmRole, int> layouts;
    std::map<GemmRole, std::uint32_t> segments;
    for (const auto* pass : {&k.forward, &k.backward})
      for (const auto& step : *pass) {
        int n = 0;
        for (const auto& a : step.actions)
          if (const auto* l = std::get_if<KernelLaunch>(&a))
            n += l->role == LaunchRole::scale_layout_a || l->role == LaunchRole::scale_layout_b;
        for (const auto& a : step.actions)
          if (const auto* c = std::get_if<GemmCall>(&a)) {
            EXPECT_EQ(c->backend, "generated");
            EXPECT_EQ(c->operands, GemmCall::Operands::fp8);
            layouts[c->role] += n;
            segments[c->role] = c->segments;
          }
      }
    EXPECT_EQ(layouts[GemmRole::fprop], 2);
    EXPECT_EQ(layouts[GemmRole::dgrad], 2);
    // Sequence parallel over 2 ranks gathers X along tokens: wgrad reads it a
    // rank segment at a time and keeps both operands' codes row-major.
    EXPECT_EQ(segments[GemmRole::wgrad], ranks);
    EXPECT_EQ(layouts[GemmRole::wgrad], ranks > 1 ? 0 : 2);
  }
}

// The GemmArgs the GPU executor builds for lowered GEMM `c` of step `g`
// (GpuRankExecutor::gemm and operand()), with aligned stand-in pointers; for
// a segmented call, segment `segment`'s.
GemmArgs executor_args(const LayerPlan& lp, const GemmStep& g, const GemmCall& c,
                       const LoweredStep& l, std::int64_t segment) {
  const auto has = [&](LaunchRole role) {
    for (const auto& a : l.actions)
      if (const auto* k = std::get_if<KernelLaunch>(&a); k && k->role == role) return true;
    return false;
  };
  const auto operand = [&](int id, int kd, LaunchRole layout, bool pad) {
    const Tensor& t = lp.tensor(id);
    GemmOperand op;
    op.data = 0x10000;
    op.type = t.type;
    op.scaling = t.scaling;
    const std::int64_t outer = static_cast<std::int64_t>(t.dims[t.outer_dim()].local);
    const std::int64_t inner = static_cast<std::int64_t>(t.dims[t.inner_dim()].local);
    EXPECT_EQ(t.inner_dim(), kd) << t.name << ": an FP8 operand keeps K innermost";
    op.rows = outer;
    op.k = inner / static_cast<std::int64_t>(c.segments);
    op.ld = t.segmented ? op.k : inner;
    op.scale_inv = 0x20000;
    if (has(layout)) op.scale_order = BlockScaleOrder::k_block_major;
    if (pad) op.scale_stride = (inner / 128 + 3) / 4 * 4;
    return op;
  };
  const int ka = g.role == GemmRole::wgrad ? 0 : 1;
  const int kb = g.role == GemmRole::fprop ? 1 : 0;
  GemmArgs args;
  args.a = operand(g.a, ka, LaunchRole::scale_layout_a, c.pad_scales_a);
  args.b = operand(g.b, kb, LaunchRole::scale_layout_b, c.pad_scales_b);
  const Tensor& out = lp.tensor(g.out);
  const OutputEpilogue& e = g.epilogue;
  args.d = 0x30000;
  args.d_type = out.type;
  args.ldd = static_cast<std::int64_t>(out.dims[1].local);
  if (e.bias != kNoTensor) {
    args.bias = 0x40000;
    args.bias_type = lp.tensor(e.bias).type;
  }
  args.activation = c.activation;
  if (e.pre_activation != kNoTensor) {
    const Tensor& z = lp.tensor(e.pre_activation);
    args.aux = 0x50000;
    args.aux_type = z.type;
    args.ld_aux = static_cast<std::int64_t>(z.dims[1].local);
  }
  if (e.out_scale != kNoTensor) args.d_scale = 0x60000;
  if (e.out_amax != kNoTensor) args.d_amax = 0x70000;
  if (c.columnwise_output) {  // a chained consumer's columnwise input, as D^T
    args.d_t = 0x80000;
    args.ld_dt = static_cast<std::int64_t>(out.dims[0].local);
  }
  if (c.activation_after) {  // the GEMM writes z; a kernel makes y
    args.d_type = args.aux_type;
    args.ldd = args.ld_aux;
    args.aux = 0;
    args.d_scale = args.d_amax = 0;
  }
  // A dgrad handing its producer FP8 dz: act' of the producer's z and its
  // dbias in the generated GEMM; after cuBLASLt, high precision into
  // staging for the quantize kernel that makes dz.
  if (c.dact != Activation::none) {
    const Tensor& z = lp.tensor(e.dact_input);
    args.dact = c.dact;
    args.aux = 0x100000000000;  // far from the stand-ins above: the runner checks overlaps
    args.aux_type = z.type;
    args.ld_aux = static_cast<std::int64_t>(z.dims[1].local);
  }
  if (c.dbias) {
    args.dbias = 0x200000000000;
    args.dbias_type = lp.tensor(e.dbias).type;
    args.dbias_workspace = 0x300000000000;
  }
  for (const auto& a : l.actions)
    if (const auto* k = std::get_if<KernelLaunch>(&a);
        k && k->role == LaunchRole::gradient_after_gemm) {
      args.d_type = std::get<QuantizeKernel>(k->kernel.description).input;
      args.d_scale = args.d_amax = 0;
    }
  args.accumulate = g.accumulate || segment > 0;
  return args;
}

// One GEMM step of a lowered spec, as the checks below visit them.
struct LoweredGemm {
  std::string where;  // spec, ranks, tokens, layer and role, for messages
  const LayerPlan& plan;
  const LoweredLayer& lowered;
  const GemmStep& step;
  const GemmCall& call;
  const LoweredStep& lowered_step;
};

// Every spec of examples/ and tests/specs.
std::vector<std::string> spec_files() {
  std::vector<std::string> files;
  for (const char* dir : {"examples", "tests/specs"})
    for (const auto& entry : std::filesystem::directory_iterator(::fp8c::testing::source_path(dir)))
      if (entry.path().extension() == ".fp8") files.push_back(entry.path().string());
  return files;
}

// Every layer of every spec in examples/ and tests/specs, planned at each of
// `ranks` (where the spec splits that way) for 1024 tokens and lowered with
// the default (Hopper) options; `where` names the file, ranks and layer.
void for_each_lowered_layer(
    std::initializer_list<std::uint32_t> ranks,
    const std::function<void(const std::string& where, const Layer&, const LayerPlan&,
                             const LoweredLayer&)>& visit) {
  for (const auto& file : spec_files()) {
    const Spec spec = load_spec(file);
    for (std::uint32_t n : ranks) {
      Plan plan;
      try {
        plan = plan_spec(spec, {n, 1024});
      } catch (const PlanError&) {
        continue;
      }
      for (const LayerPlan& lp : plan.layers) {
        const Layer& layer = *spec.find_layer(lp.layer);
        visit(file + " at " + std::to_string(n) + " ranks, layer " + lp.layer, layer, lp,
              lower_layer(layer, lp, {}));
      }
    }
  }
}

// Every GEMM of every spec in examples/ and tests/specs at 1, 2, 4 and 8
// ranks and 1024, 1056 and 4096 tokens (where the spec splits that way),
// lowered with `options` (default: Hopper's); `backend`, when given,
// replaces every layer's `gemm =` (whatever the spec's target).
void for_each_lowered_gemm(std::optional<GemmBackend> backend,
                           const std::function<void(const LoweredGemm&)>& visit,
                           const LowerOptions& options = {}) {
  for (const auto& file : spec_files()) {
    Spec spec = load_spec(file);
    if (backend)
      for (Layer& layer : spec.layers) layer.gemm = *backend;
    for (std::uint32_t ranks : {1u, 2u, 4u, 8u})
      for (std::uint64_t tokens : {1024u, 1056u, 4096u}) {
        Plan plan;
        try {
          plan = plan_spec(spec, {ranks, tokens});
        } catch (const PlanError&) {
          continue;  // does not split that way
        }
        for (const LayerPlan& lp : plan.layers) {
          const LoweredLayer low = lower_layer(*spec.find_layer(lp.layer), lp, options);
          for (const auto& [steps, lowered] :
               {std::pair{&lp.forward, &low.forward}, std::pair{&lp.backward, &low.backward}})
            for (std::size_t i = 0; i < steps->size(); ++i) {
              const auto* g = (*steps)[i].as<GemmStep>();
              if (!g) continue;
              const GemmCall* c = nullptr;
              for (const auto& a : (*lowered)[i].actions)
                if (const auto* x = std::get_if<GemmCall>(&a)) c = x;
              ASSERT_NE(c, nullptr);
              visit({file + " at " + std::to_string(ranks) + " ranks, " + std::to_string(tokens) +
                         " tokens, layer " + lp.layer + " " + std::string(to_string(g->role)),
                     lp, low, *g, *c, (*lowered)[i]});
            }
        }
      }
  }
}

// A GEMM whose plan step writes a chained consumer's columnwise input
// (OutputEpilogue::out_columnwise) writes it as D^T on the generated GEMM
// and by a transpose launched after the GEMM on cuBLASLt, over every spec
// and both backends: never both, never neither.
TEST(ExecutorLogic, AChainsColumnwiseInputIsWrittenOnceByEitherBackend) {
  for (GemmBackend backend : {GemmBackend::generated, GemmBackend::cublaslt}) {
    int fused = 0, transposed = 0;
    for_each_lowered_gemm(backend, [&](const LoweredGemm& x) {
      int after = 0;
      bool gemm_seen = false, transpose_before_gemm = false;
      for (const auto& a : x.lowered_step.actions) {
        if (std::holds_alternative<GemmCall>(a)) gemm_seen = true;
        if (const auto* k = std::get_if<KernelLaunch>(&a);
            k && k->role == LaunchRole::transpose_output) {
          ++after;
          transpose_before_gemm = transpose_before_gemm || !gemm_seen;
        }
      }
      if (x.step.epilogue.out_columnwise == kNoTensor) {
        EXPECT_FALSE(x.call.columnwise_output) << x.where;
        EXPECT_EQ(after, 0) << x.where;
        return;
      }
      if (x.step.role == GemmRole::dgrad) return;  // the producer's dz: the test below
      EXPECT_EQ(x.step.role, GemmRole::fprop) << x.where;
      EXPECT_EQ(x.call.columnwise_output ? 1 : 0, x.call.backend == "generated" ? 1 : 0) << x.where;
      EXPECT_EQ(after, x.call.columnwise_output ? 0 : 1) << x.where;
      EXPECT_FALSE(transpose_before_gemm) << x.where;
      (x.call.columnwise_output ? fused : transposed) += 1;
    });
    if (backend == GemmBackend::generated)
      EXPECT_GT(fused, 0) << "chain_fp8_output.fp8's column producer";
    else
      EXPECT_GT(transposed, 0);
  }
}

// A dgrad that hands its producer FP8 dz (chain_hands_dz) makes it exactly
// once: in the generated GEMM's epilogue (dact, dbias, D^T as the plan
// asks), or after cuBLASLt's high-precision GEMM by one quantize launch
// with the same dact, dbias and both usages (plus its dbias reduction),
// never before the GEMM; over every spec and both backends.
TEST(ExecutorLogic, AHandedDzIsMadeOnceByEitherBackend) {
  for (GemmBackend backend : {GemmBackend::generated, GemmBackend::cublaslt}) {
    int fused = 0, after_gemm = 0;
    for_each_lowered_gemm(backend, [&](const LoweredGemm& x) {
      const OutputEpilogue& e = x.step.epilogue;
      const bool handed = x.step.role == GemmRole::dgrad && x.plan.tensor(x.step.out).is_fp8();
      int quantizes = 0, reductions = 0;
      bool gemm_seen = false, before_gemm = false;
      const QuantizeKernel* q = nullptr;
      for (const auto& a : x.lowered_step.actions) {
        if (std::holds_alternative<GemmCall>(a)) gemm_seen = true;
        const auto* k = std::get_if<KernelLaunch>(&a);
        if (!k) continue;
        if (k->role == LaunchRole::gradient_after_gemm) {
          ++quantizes;
          q = std::get_if<QuantizeKernel>(&k->kernel.description);
          before_gemm = before_gemm || !gemm_seen;
        }
        if (k->role == LaunchRole::dbias_reduce) ++reductions;
      }
      if (!handed) {
        EXPECT_EQ(quantizes, 0) << x.where;
        EXPECT_EQ(x.call.dact, Activation::none) << x.where;
        EXPECT_FALSE(x.call.dbias) << x.where;
        return;
      }
      EXPECT_NE(e.out_scale, kNoTensor) << x.where;
      EXPECT_NE(e.out_amax, kNoTensor) << x.where;
      EXPECT_FALSE(before_gemm) << x.where;
      if (x.call.backend == "generated") {
        EXPECT_EQ(quantizes + reductions, 0) << x.where;
        EXPECT_EQ(x.call.dact, e.dact) << x.where;
        EXPECT_EQ(x.call.dbias, e.dbias != kNoTensor) << x.where;
        EXPECT_TRUE(x.call.fp8_output) << x.where;
        EXPECT_EQ(x.call.columnwise_output, e.out_columnwise != kNoTensor) << x.where;
        ++fused;
        return;
      }
      ASSERT_EQ(quantizes, 1) << x.where;
      ASSERT_NE(q, nullptr) << x.where;
      EXPECT_FALSE(x.call.fp8_output) << x.where;  // high precision into staging
      EXPECT_FALSE(x.call.columnwise_output) << x.where;
      EXPECT_EQ(q->dact, e.dact) << x.where;
      EXPECT_EQ(q->dbias, e.dbias != kNoTensor) << x.where;
      EXPECT_EQ(reductions, e.dbias != kNoTensor ? 1 : 0) << x.where;
      EXPECT_TRUE(q->rowwise && q->amax) << x.where;
      EXPECT_EQ(q->columnwise, e.out_columnwise != kNoTensor) << x.where;
      EXPECT_EQ(q->format, x.plan.tensor(x.step.out).type) << x.where;
      if (e.dact_input != kNoTensor) {
        EXPECT_EQ(q->input, x.plan.tensor(e.dact_input).type) << x.where;
      }
      EXPECT_GE(x.lowered.staging.gemm_output,
                x.plan.tensor(x.step.out).elements() * element_bytes(q->input))
          << x.where;
      ++after_gemm;
    });
    // chain_fp8_output.fp8: a column producer into a row consumer.
    EXPECT_GT(backend == GemmBackend::generated ? fused : after_gemm, 0);
  }
}

// Every GEMM the lowering gives to cuBLASLt's block-scaled mode is one
// cuBLASLt takes (runtime/gemm/cublaslt_requirements.hpp, Hopper, 12.9),
// over every example and tests/specs spec at several ranks and token
// counts: the lowering's rules and the runner's never disagree, so a
// fallback is chosen up front, not met as an error at run time.
TEST(ExecutorLogic, EveryBlockScaledFp8GemmIsOneCublasLtTakes) {
  int checked = 0, fallbacks = 0;
  for_each_lowered_gemm(GemmBackend::cublaslt, [&](const LoweredGemm& x) {
    if (!x.plan.tensor(x.step.a).block_scaled()) return;
    if (x.call.operands != GemmCall::Operands::fp8) {
      ++fallbacks;
      return;
    }
    for (std::int64_t r = 0; r < static_cast<std::int64_t>(x.call.segments); ++r) {
      const auto problem =
          cublaslt_form_problem(executor_args(x.plan, x.step, x.call, x.lowered_step, r),
                                kCublasLtBlockScalingVersion, 90);
      EXPECT_FALSE(problem.has_value()) << x.where << ": " << problem.value_or("");
      ++checked;
    }
  });
  EXPECT_GT(checked, 100);
  EXPECT_GT(fallbacks, 0);  // MXFP8, and 1056 tokens' partial K blocks
}

// Every spec (examples, tests/specs) with each layer on `gemm = generated`,
// at several ranks and token counts: every GEMM the lowering gives the
// generated GEMM is one it takes (generated_gemm_problem, the H200's 132
// SMs); the FP8 GEMMs it keeps on cuBLASLt say why in the notes; and every
// configuration the generated GEMM would pick compiles for sm_90a with no
// spills.
TEST(ExecutorLogic, EveryGeneratedGemmIsOneItTakesAndCompiles) {
  std::map<std::string, KernelSource> configurations;
  int generated = 0, kept = 0;
  for_each_lowered_gemm(GemmBackend::generated, [&](const LoweredGemm& x) {
    if (x.call.backend != "generated") {
      EXPECT_EQ(x.call.backend, "cublaslt");
      if (!x.step.high_precision) {
        EXPECT_TRUE(has_note(x.lowered, "not the generated GEMM")) << x.where;
        ++kept;
      }
      return;
    }
    EXPECT_FALSE(x.step.high_precision) << x.where;
    EXPECT_FALSE(x.call.activation_after) << x.where;
    for (std::int64_t r = 0; r < static_cast<std::int64_t>(x.call.segments); ++r) {
      const GemmArgs args = executor_args(x.plan, x.step, x.call, x.lowered_step, r);
      EXPECT_EQ(generated_gemm_problem(args, false, 132), "") << x.where;
      const Fp8GemmKernel k = generated_gemm_choice(args, false, 132).kernel;
      configurations.emplace(k.name(), emit_cuda(k));
      ++generated;
    }
  });
  EXPECT_GT(generated, 100);
  // Every FP8 form in these specs, MXFP8 included, is one the generated GEMM takes.
  EXPECT_EQ(kept, 0);
  std::vector<KernelSource> sources;
  for (auto& [name, source] : configurations) sources.push_back(source);
  RecordProperty("configurations", std::to_string(sources.size()));
  ::fp8c::testing::expect_compiles_without_spills(sources, "fp8c-generated-gemm-examples-test");
}

// Every spec with each layer on `gemm = auto` (the default), at several ranks
// and token counts: each FP8 GEMM put on cuBLASLt in FP8 is one cuBLASLt's
// runner takes (runtime/gemm/cublaslt_requirements.hpp, Hopper, 12.9), each
// put on the generated GEMM one the generated runner takes, and no FP8 GEMM
// is dequantized that the generated GEMM could run: the lowering's rule and
// both runners' never disagree. (The form rules are the lowering's own
// copy, cublaslt_fp8_problem: this is what holds them together.)
TEST(ExecutorLogic, EveryAutoGemmIsOneItsBackendTakes) {
  int on_cublaslt = 0, on_generated = 0, dequantized = 0;
  for_each_lowered_gemm(GemmBackend::automatic, [&](const LoweredGemm& x) {
    if (x.step.high_precision) {
      EXPECT_EQ(x.call.backend, "cublaslt") << x.where;
      return;
    }
    for (std::int64_t r = 0; r < static_cast<std::int64_t>(x.call.segments); ++r) {
      const GemmArgs args = executor_args(x.plan, x.step, x.call, x.lowered_step, r);
      if (x.call.backend == "generated") {
        EXPECT_EQ(generated_gemm_problem(args, false, 132), "") << x.where;
        EXPECT_TRUE(has_note(x.lowered, "(gemm = auto)")) << x.where;
        ++on_generated;
      } else if (x.call.operands == GemmCall::Operands::fp8) {
        const auto problem = cublaslt_form_problem(args, kCublasLtBlockScalingVersion, 90);
        EXPECT_FALSE(problem.has_value()) << x.where << ": " << problem.value_or("");
        ++on_cublaslt;
      } else {
        // MXFP8 alone: the generated GEMM takes it but measured slower than
        // the dequantize path, so auto keeps that (codegen/lower/lower.cpp).
        EXPECT_EQ(x.plan.tensor(x.step.a).scaling, Scaling::mx_1x32)
            << x.where << ": dequantized, though the generated GEMM takes block scales";
        EXPECT_EQ(generated_gemm_problem(args, false, 132), "") << x.where;
        EXPECT_TRUE(has_note(x.lowered, "MXFP8 dequantized for cuBLASLt (gemm = auto)")) << x.where;
        ++dequantized;
      }
    }
  });
  EXPECT_GT(on_cublaslt, 100);
  EXPECT_GT(on_generated, 0);  // e5m2 x e5m2, fp32 bias, block shapes cuBLASLt cannot read
  EXPECT_GT(dequantized, 0);   // MXFP8
  std::printf("auto: %d on cuBLASLt, %d generated, %d dequantized\n", on_cublaslt, on_generated,
              dequantized);
}

// With a table of measurements (codegen/lower/gemm_table.hpp) that has the
// generated GEMM faster at every shape, `gemm = auto` moves every GEMM both
// backends run in FP8 onto it, each a call it takes, with the note naming
// the measurement; one that has it slower keeps them all on cuBLASLt.
TEST(ExecutorLogic, AutoFollowsATableOfMeasurements) {
  for (const bool generated_faster : {true, false}) {
    auto table = std::make_shared<GemmTable>();
    table->source = "table.txt";
    for (GemmForm form :
         {GemmForm::per_tensor, GemmForm::block_1x128_128x128, GemmForm::block_1x128_1x128})
      for (std::uint64_t m = 16; m <= (1u << 17); m *= 2)
        for (std::uint64_t n = 16; n <= (1u << 17); n *= 2)
          for (std::uint64_t k = 16; k <= (1u << 17); k *= 2)
            table->entries.push_back(
                {form, m, n, k, generated_faster ? 1.0 : 2.0, generated_faster ? 2.0 : 1.0});
    LowerOptions options;
    options.gemm_table = table;
    int moved = 0, kept = 0, measured_kept = 0;
    for_each_lowered_gemm(
        GemmBackend::automatic,
        [&](const LoweredGemm& x) {
          if (x.step.high_precision || x.call.operands != GemmCall::Operands::fp8) return;
          const Tensor& a = x.plan.tensor(x.step.a);
          const bool measured_form = !a.block_scaled() || a.scaling == Scaling::block_1x128;
          for (std::int64_t r = 0; r < static_cast<std::int64_t>(x.call.segments); ++r) {
            const GemmArgs args = executor_args(x.plan, x.step, x.call, x.lowered_step, r);
            if (x.call.backend == "generated") {
              EXPECT_EQ(generated_gemm_problem(args, false, 132), "") << x.where;
              // The rule's cases (cuBLASLt cannot run it in FP8) stay generated either way.
              if (has_note(x.lowered, "the generated GEMM (gemm = auto), the faster at")) ++moved;
            } else {
              EXPECT_FALSE(cublaslt_form_problem(args, kCublasLtBlockScalingVersion, 90))
                  << x.where;
              ++kept;
              if (measured_form && has_note(x.lowered, "cuBLASLt (gemm = auto), the faster at "))
                ++measured_kept;
            }
          }
        },
        options);
    if (generated_faster) {
      EXPECT_GT(moved, 100);
      // Only forms no table measures (128x128 x 1x128) stay on cuBLASLt.
      EXPECT_LT(kept, moved / 10) << kept << " kept, " << moved << " moved";
    } else {
      EXPECT_EQ(moved, 0);
      EXPECT_GT(measured_kept, 100);
    }
  }
}

// A table's measurement decides only near its shape (within 2x in every
// dim), names itself and its times in the notes, and one measured on
// another GPU is not used (runtime/gemm/gemm_table_file.hpp) and says so.
TEST(ExecutorLogic, AutoTableNotesSayWhatDecided) {
  const Spec spec = load_spec(::fp8c::testing::source_path("examples/gpt_mlp.fp8"));
  const Plan plan = plan_spec(spec, {1, 4096});
  const LayerPlan& lp = plan.layers[0];
  const Layer& layer = *spec.find_layer(lp.layer);
  // The fprop GEMM's shape, from the plan: M tokens, N the output features, K the input ones.
  const GemmStep* fprop = nullptr;
  for (const Step& s : lp.forward)
    if (const auto* g = s.as<GemmStep>(); g && g->role == GemmRole::fprop) fprop = g;
  ASSERT_NE(fprop, nullptr);
  const Tensor& a = lp.tensor(fprop->a);
  const Tensor& b = lp.tensor(fprop->b);
  const std::uint64_t m = a.dims[static_cast<std::size_t>(a.outer_dim())].local;
  const std::uint64_t n = b.dims[static_cast<std::size_t>(b.outer_dim())].local;
  const std::uint64_t k = a.dims[static_cast<std::size_t>(a.inner_dim())].local;
  const auto fprop_backend = [&](const LoweredLayer& low) {
    for (const auto& l : low.forward)
      for (const auto& action : l.actions)
        if (const auto* c = std::get_if<GemmCall>(&action); c && c->role == GemmRole::fprop)
          return c->backend;
    return std::string("none");
  };
  auto table = std::make_shared<GemmTable>();
  table->source = "measured.txt";
  table->entries.push_back({GemmForm::per_tensor, m * 2, n, k, 0.5, 0.75});
  LowerOptions options;
  options.gemm_table = table;
  LoweredLayer low = lower_layer(layer, lp, options);
  EXPECT_EQ(fprop_backend(low), "generated");
  const std::string shape =
      std::to_string(m * 2) + "x" + std::to_string(n) + "x" + std::to_string(k);
  EXPECT_TRUE(has_note(low, "fprop: the generated GEMM (gemm = auto), the faster at per_tensor " +
                                shape + " in measured.txt (generated 0.500 ms against 0.750"));

  // Beyond 2x in one dim: no measurement applies, the rule stands.
  table->entries[0].m = m * 4;
  low = lower_layer(layer, lp, options);
  EXPECT_EQ(fprop_backend(low), "cublaslt");
  EXPECT_TRUE(has_note(low,
                       "fprop: on cuBLASLt (gemm = auto): measured.txt measured no "
                       "per_tensor GEMM within 2x of"));

  // A table for another GPU: the note says it was not used.
  LowerOptions other;
  other.gemm_table_note =
      "gemm = auto: the GEMM table t.txt was measured on A, not this B; not used";
  low = lower_layer(layer, lp, other);
  EXPECT_EQ(fprop_backend(low), "cublaslt");
  EXPECT_TRUE(has_note(low, "measured on A, not this B; not used"));

  // `gemm = cublaslt` is not overridden by any table.
  Layer pinned = layer;
  pinned.gemm = GemmBackend::cublaslt;
  table->entries[0].m = m;
  EXPECT_EQ(fprop_backend(lower_layer(pinned, lp, options)), "cublaslt");
}

// `fp8c plan --lowered` shows the choice, from the spec's target: Hopper runs
// the block-scaled GEMM, another target dequantizes and says why.
// `fp8c plan --lowered` says what each overlap does with the collectives:
// none keeps them on the compute stream, bulk and ring put them on the
// communication stream, ring as rings where a GEMM takes them by chunks.
TEST(ExecutorLogic, PlanLoweredSaysWhatOverlapDoes) {
  for (const char* overlap : {"none", "bulk", "ring"}) {
    SCOPED_TRACE(overlap);
    const Spec spec = spec_from(
        std::string("layer l = linear { in = 256  out = 512  recipe = current { }\n"
                    "  layout = { tensor_parallel = 2  sequence_parallel = true  overlap = ") +
        overlap + " } column }\n");
    PlanOptions o;
    o.ranks = 2;
    o.tokens = 256;
    const Plan plan = plan_spec(spec, o);
    const LoweredPlan low = lower_plan(spec, plan);
    const std::string text = print_lowered(plan, low);
    const bool none = std::string(overlap) == "none";
    EXPECT_EQ(text.find("on the communication stream") != std::string::npos, !none) << text;
    EXPECT_EQ(text.find("overlap = bulk: each collective runs whole") != std::string::npos,
              std::string(overlap) == "bulk")
        << text;
    EXPECT_EQ(
        text.find("overlap = ring: an all-gather read by one GEMM alone") != std::string::npos,
        std::string(overlap) == "ring")
        << text;
    EXPECT_EQ(text.find("as a ring of 1 shift to the next rank") != std::string::npos,
              std::string(overlap) == "ring")
        << text;
    int collectives = 0;
    for (const auto* pass : {&low.layers[0].forward, &low.layers[0].backward})
      for (const LoweredStep& step : *pass)
        for (const auto& a : step.actions)
          if (const auto* c = std::get_if<CollectiveCall>(&a)) {
            EXPECT_EQ(c->on_comm_stream, !none);
            ++collectives;
          }
    EXPECT_GT(collectives, 0);
  }
}

// fp8c plan --lowered shows the schedule (the issue order where it is not
// the plan's, the steps on the side stream) and, for a layer with
// weight_cache, the weight-only steps; FP8C_SIDE_STREAM's option off keeps
// every step on the main stream in the plan's order.
TEST(ExecutorLogic, PlanLoweredShowsTheScheduleAndTheWeightOnlySteps) {
  const Spec spec = spec_from(
      "recipe c = current { }\n"
      "layer l = linear { in = 256  out = 512  recipe = c  weight_cache = true }\n");
  const Plan plan = plan_spec(spec, PlanOptions{1, 256});
  const std::string text = print_lowered(plan, lower_plan(spec, plan));
  EXPECT_NE(text.find("issued in the order 2 3 0 1 4"), std::string::npos) << text;
  EXPECT_NE(text.find("amax l.w (weight only: skipped while cached) [side stream]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("weight_cache = true: the 2 weight-only steps are skipped"),
            std::string::npos)
      << text;
  LowerOptions off;
  off.side_stream = false;
  const LoweredLayer l = lower_layer(spec.layers[0], plan.layers[0], off);
  for (std::size_t i = 0; i < l.forward.size(); ++i) {
    EXPECT_FALSE(l.forward[i].on_side_stream) << i;
    EXPECT_EQ(l.forward_order[i], static_cast<int>(i));
  }
}

TEST(ExecutorLogic, PlanLoweredShowsWhereBlockScaledGemmsRun) {
  const std::string layer = layer_text("blockwise", "column", false, 1, 1024, 2048);
  for (const char* target : {"sm_90a", "sm_100a"}) {
    SCOPED_TRACE(target);
    const Spec spec = spec_from(std::string("target = ") + target + "\n" + layer);
    PlanOptions o;
    o.tokens = 1024;
    const Plan plan = plan_spec(spec, o);
    const std::string text = print_lowered(plan, lower_plan(spec, plan));
    const bool hopper = std::string(target) == "sm_90a";
    EXPECT_EQ(text.find("block-scaled FP8 GEMM") != std::string::npos, hopper) << text;
    EXPECT_EQ(text.find("transpose_u32 (scale_layout_a)") != std::string::npos, hopper) << text;
    EXPECT_EQ(text.find("on cublaslt, dequantized operands") != std::string::npos, !hopper) << text;
    if (!hopper) {
      EXPECT_NE(text.find("the target is sm_100a"), std::string::npos) << text;
    }
  }
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
  // Without a dbias the block kernel fuses dact itself: no staging.
  const auto fused = kernels_of(
      layer_text("blockwise", "column", false, 1, 256, 512, "activation = silu"), 1, 256);
  EXPECT_EQ(fused.staging.dz_fp32, 0u);
  const auto fused_blocks = all_of<BlockQuantizeKernel>(fused);
  EXPECT_TRUE(std::any_of(fused_blocks.begin(), fused_blocks.end(), [](const auto& b) {
    return b.dact == Activation::silu && b.input == ElemType::bf16;
  }));
  for (const auto& e : all_of<EpilogueKernel>(fused)) EXPECT_FALSE(e.backward) << e.name();
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

// A layer fed in FP8 by its producer watches the input amax the producer's
// epilogue wrote: a NaN the producer made would otherwise reach this
// layer's history, under nan = error, while its own quantizes saw none.
TEST(ExecutorLogic, NanErrorWatchesAnFp8InputsAmax) {
  const Spec spec = spec_from(R"(
recipe r = delayed { history = 4  nan = error }
layer fc1 = linear { in = 256  out = 512  activation = gelu  output = fp8  recipe = r }
layer fc2 = linear { input = fc1  out = 256  recipe = r }
)");
  const Plan plan = plan_spec(spec, PlanOptions{1, 256});
  const LayerPlan& consumer = plan.layers[1];
  ASSERT_NE(consumer.io.x_fp8, kNoTensor);
  const LoweredLayer k = lower_layer(spec.layers[1], consumer, {});
  ASSERT_TRUE(k.nan_verdict.has_value());
  ASSERT_FALSE(k.nan_verdict->watched.empty());
  EXPECT_EQ(k.nan_verdict->watched[0].amax, consumer.io.x_amax);
  EXPECT_EQ(k.nan_verdict->watched[0].source, consumer.io.x_fp8);
  // The producer watches the dz amax fc2's dgrad epilogue writes, after its
  // forward's amaxes: a NaN in its forward (which reaches dz through z) is
  // named where it was made.
  const LayerPlan& producer = plan.layers[0];
  ASSERT_NE(producer.io.dy_amax, kNoTensor);
  const LoweredLayer p = lower_layer(spec.layers[0], producer, {});
  ASSERT_TRUE(p.nan_verdict.has_value());
  const auto& w = p.nan_verdict->watched;
  ASSERT_GE(w.size(), 3u);  // x, w, then dz
  EXPECT_EQ(w[0].source, producer.io.x);
  EXPECT_EQ(w.back().amax, producer.io.dy_amax);
  EXPECT_EQ(w.back().source, producer.io.dy);
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
    const Spec spec = load_spec(file);
    for (const auto& k : plan_session(spec, o, 1, lower_options_for(spec.target)).lowered.kernels)
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

// The FP8 weight cache's steps (LoweredStep::weight_only), over every spec
// (examples, tests/specs) at 1-8 ranks and two token counts: every cast of
// the weight (a quantize whose source is w) is one, no GEMM or collective is
// (every rank runs its collectives, whether it keeps its cast or not), none reads
// the caller's x, dy or bias or anything a non-weight step makes; and every
// FP8 copy of the weight a GEMM reads dequantizes with the scale its cast
// quantized with (so the executor's kept scale pair serves both).
TEST(ExecutorLogic, WeightOnlyStepsAreTheWeightsCastsAndNothingElse) {
  int casts = 0, layers = 0;
  for (const auto& file : spec_files()) {
    const Spec spec = load_spec(file);
    for (std::uint32_t ranks : {1u, 2u, 4u, 8u})
      for (std::uint64_t tokens : {1024u, 4096u}) {
        Plan plan;
        try {
          plan = plan_spec(spec, {ranks, tokens});
        } catch (const PlanError&) {
          continue;
        }
        for (const LayerPlan& lp : plan.layers) {
          const std::string where =
              file + " at " + std::to_string(ranks) + " ranks, layer " + lp.layer;
          const LoweredLayer low = lower_layer(*spec.find_layer(lp.layer), lp, {});
          std::set<int> weights = {lp.io.w}, others;
          for (const auto& [steps, lowered] :
               {std::pair{&lp.forward, &low.forward}, std::pair{&lp.backward, &low.backward}})
            for (std::size_t i = 0; i < steps->size(); ++i) {
              const Step& s = (*steps)[i];
              const bool only = (*lowered)[i].weight_only;
              const auto* q = s.as<QuantizeStep>();
              if (q && q->src == lp.io.w) {
                EXPECT_TRUE(only) << where << ": the cast of w is not weight-only";
                ++casts;
              }
              if (s.kind() == StepKind::gemm || s.is_collective()) {
                EXPECT_FALSE(only) << where << ": a GEMM or a collective";
              }
              for (int id : s.inputs()) {
                if (!only) continue;
                EXPECT_FALSE(id == lp.io.x || id == lp.io.dy || id == lp.io.b || others.count(id))
                    << where << ": weight-only step " << i << " reads " << lp.tensor(id).name;
              }
              // A collective of the weight's alone runs anyway, but what it
              // makes is still the weight's.
              bool of_weight = s.is_collective();
              for (int id : s.inputs()) of_weight = of_weight && weights.count(id);
              for (int id : s.outputs()) (only || of_weight ? weights : others).insert(id);
              if (q && only && q->scale != kNoTensor)
                for (int out : {q->rowwise, q->columnwise})
                  if (out != kNoTensor) {
                    EXPECT_EQ(lp.tensor(out).scale, q->scale)
                        << where << ": " << lp.tensor(out).name << " is read with another scale";
                  }
            }
          ++layers;
        }
      }
  }
  EXPECT_GT(casts, 100);
  EXPECT_GT(layers, 100);
}

// The side-stream schedule (codegen/lower/schedule.hpp) over every spec at
// 1-8 ranks: the issue order is a permutation of the pass that puts every
// step after each earlier step it has a hazard with (reads what it wrote,
// writes what it read or wrote, the same scratch: dbias partials, fp32 dz
// staging), and names that step in its `after` (so a step on another stream
// waits for it); GEMMs and collectives stay off the side stream and the
// collectives keep their plan order (every rank issues the same calls in
// the same order).
TEST(ExecutorLogic, TheSideStreamScheduleKeepsEveryHazard) {
  int side = 0, reordered = 0, passes = 0;
  const auto scratch = [](const LoweredStep& l, LaunchRole role) {
    return l.find_launch(role) != nullptr;
  };
  for_each_lowered_layer({1u, 2u, 4u, 8u}, [&](const std::string& where, const Layer&,
                                               const LayerPlan& lp, const LoweredLayer& low) {
    for (const auto& [steps, lowered, order] :
         {std::tuple{&lp.forward, &low.forward, &low.forward_order},
          std::tuple{&lp.backward, &low.backward, &low.backward_order}}) {
      const std::size_t n = steps->size();
      ASSERT_EQ(order->size(), n) << where;
      std::vector<int> position(n, -1);
      for (std::size_t k = 0; k < n; ++k) {
        const auto i = static_cast<std::size_t>((*order)[k]);
        ASSERT_LT(i, n) << where;
        ASSERT_EQ(position[i], -1) << where << ": step " << i << " issued twice";
        position[i] = static_cast<int>(k);
        reordered += (*order)[k] != static_cast<int>(k);
      }
      // overlap = ring: a ring's GEMM step issues its collective and
      // takes its reads and writes; the collective's own step does nothing.
      std::vector<std::vector<int>> in(n), out(n);
      std::vector<bool> issues(n, false);
      for (std::size_t i = 0; i < n; ++i) {
        in[i] = (*steps)[i].inputs();
        out[i] = (*steps)[i].outputs();
        issues[i] = (*steps)[i].is_collective();
      }
      for (std::size_t c = 0; c < n; ++c) {
        if ((*lowered)[c].ring_gemm() < 0) continue;
        const auto g = static_cast<std::size_t>((*lowered)[c].ring_gemm());
        in[g].insert(in[g].end(), in[c].begin(), in[c].end());
        out[g].insert(out[g].end(), out[c].begin(), out[c].end());
        in[c].clear();
        out[c].clear();
        issues[c] = false;
        issues[g] = true;
      }
      int last_collective = -1;
      for (std::size_t k = 0; k < n; ++k) {
        const auto i = static_cast<std::size_t>((*order)[k]);
        if (!issues[i]) continue;
        EXPECT_GT(static_cast<int>(i), last_collective) << where << ": collectives reordered";
        last_collective = static_cast<int>(i);
      }
      for (std::size_t j = 0; j < n; ++j) {
        const Step& b = (*steps)[j];
        const LoweredStep& lb = (*lowered)[j];
        if (lb.on_side_stream) {
          ++side;
          EXPECT_NE(b.kind(), StepKind::gemm) << where;
          EXPECT_FALSE(b.is_collective()) << where;
        }
        for (std::size_t i = 0; i < j; ++i) {
          const LoweredStep& la = (*lowered)[i];
          const auto meets = [](const std::vector<int>& x, const std::vector<int>& y) {
            for (int v : x)
              if (std::find(y.begin(), y.end(), v) != y.end()) return true;
            return false;
          };
          const bool hazard =
              meets(in[j], out[i]) || meets(out[j], in[i]) || meets(out[j], out[i]) ||
              (scratch(la, LaunchRole::dbias_reduce) && scratch(lb, LaunchRole::dbias_reduce)) ||
              (scratch(la, LaunchRole::dact_to_staging) &&
               scratch(lb, LaunchRole::dact_to_staging));
          if (!hazard) continue;
          EXPECT_LT(position[i], position[j]) << where << ": step " << j << " before " << i;
          EXPECT_NE(std::find(lb.after.begin(), lb.after.end(), static_cast<int>(i)),
                    lb.after.end())
              << where << ": step " << j << " does not wait for step " << i;
        }
      }
      ++passes;
    }
  });
  EXPECT_GT(passes, 200);
  EXPECT_GT(side, 50);
  EXPECT_GT(reordered, 50);
}

// overlap = ring over every spec at 2, 4 and 8 ranks: each ring pairs its
// collective with the one GEMM that takes it by chunks, in the form that
// GEMM reads it; every all-gather and reduce-scatter of a ring layer is a
// ring or has a note saying why it runs as bulk; layers with another overlap
// have no rings.
TEST(ExecutorLogic, RingsPairEachCollectiveWithTheGemmThatTakesItByChunks) {
  int rings[4] = {0, 0, 0, 0}, bulk = 0;
  for_each_lowered_layer({2u, 4u, 8u}, [&](const std::string& where, const Layer& layer,
                                           const LayerPlan& lp, const LoweredLayer& low) {
    const bool ring = layer.layout.overlap == Overlap::ring && lp.ranks > 1;
    int notes = 0;
    for (const auto& n : low.notes) notes += n.find("runs as bulk:") != std::string::npos;
    bulk += notes;
    int candidates = 0, found = 0;
    for (const auto& [steps, lowered] :
         {std::pair{&lp.forward, &low.forward}, std::pair{&lp.backward, &low.backward}}) {
      for (std::size_t c = 0; c < steps->size(); ++c) {
        const Step& s = (*steps)[c];
        candidates += s.kind() == StepKind::all_gather || s.kind() == StepKind::reduce_scatter;
        if ((*lowered)[c].ring_gemm() < 0) continue;
        ++found;
        ASSERT_TRUE(ring) << where;
        const auto g = static_cast<std::size_t>((*lowered)[c].ring_gemm());
        ASSERT_LT(g, steps->size()) << where;
        const GemmStep* gemm = (*steps)[g].as<GemmStep>();
        ASSERT_NE(gemm, nullptr) << where;
        const GemmCall* gc = (*lowered)[g].find<GemmCall>();
        const bool sums = (*lowered)[g].find_launch(LaunchRole::ring_sum) != nullptr;
        ASSERT_NE(gc, nullptr) << where;
        EXPECT_EQ(gc->ring_collective, static_cast<int>(c)) << where;
        ++rings[static_cast<int>(gc->ring)];
        for (int op : {gemm->a, gemm->b}) EXPECT_FALSE(lp.tensor(op).block_scaled()) << where;
        switch (gc->ring) {
          case RingForm::gather_rows: {
            const auto& ag = *s.as<AllGatherStep>();
            EXPECT_LT(c, g) << where;
            EXPECT_EQ(gemm->a, ag.out) << where;
            EXPECT_EQ(lp.tensor(ag.out).usage, Usage::rowwise) << where;
            EXPECT_NE(gemm->role, GemmRole::wgrad) << where;
            EXPECT_EQ(gemm->epilogue.out_amax, kNoTensor) << where;
            break;
          }
          case RingForm::gather_k: {
            const auto& ag = *s.as<AllGatherStep>();
            EXPECT_LT(c, g) << where;
            EXPECT_TRUE(gemm->a == ag.out || gemm->b == ag.out) << where;
            EXPECT_EQ(gc->segments, lp.ranks) << where;
            break;
          }
          case RingForm::scatter_rows: {
            const auto& rs = *s.as<ReduceScatterStep>();
            EXPECT_GT(c, g) << where;
            EXPECT_EQ(gemm->out, rs.in) << where;
            EXPECT_TRUE(sums) << where;
            EXPECT_GE(low.staging.ring_sums, 2 * lp.tensor(rs.out).elements() * 4) << where;
            break;
          }
          case RingForm::none:
            ADD_FAILURE() << where << ": a ring collective whose GEMM runs no ring";
        }
        EXPECT_TRUE((*lowered)[c].after.empty()) << where << ": a ring's collective waits";
      }
    }
    if (ring)
      EXPECT_EQ(found + notes, candidates) << where;
    else
      EXPECT_EQ(found, 0) << where;
  });
  EXPECT_GT(rings[static_cast<int>(RingForm::gather_rows)], 5);
  EXPECT_GT(rings[static_cast<int>(RingForm::gather_k)], 5);
  EXPECT_GT(rings[static_cast<int>(RingForm::scatter_rows)], 5);
  EXPECT_GT(bulk, 0);
}

TEST(ExecutorLogic, PlanLoweredShowsTheRings) {
  const Spec spec = load_spec(::fp8c::testing::source_path("examples/gpt_mlp.fp8"));
  const Plan plan = plan_spec(spec, {8, 4096});
  const std::string text = print_lowered(plan, lower_plan(spec, plan));
  for (const char* want :
       {"collective all_gather as a ring of 7 shifts to the next rank, run by step 3",
        "gemm fprop on cublaslt, FP8 operands, +bias, +gelu, ring of step 1: 8 row chunks, each "
        "as its rank segment arrives",
        "ring of step 2: 8 row chunks, each added to the running sum from the previous rank",
        "the 8 K segments in the order they arrive", "launch ring_sum_bf16 (ring_sum)",
        "fc2.dy.fp8.row's all_gather runs as bulk: fc2.dy.fp8.row.gathered is read by 2 steps",
        "staging: ring running sums",
        // fc2's forward, checked by hand: the ring GEMM (6) issues its
        // shifts after both amax all-reduces (1, 4), and the reduce-scatter's
        // own step (7), which issues nothing, waits for nothing.
        "issued in the order 3 0 1 2 7 4 5 6 8"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  EXPECT_EQ(text.find("not built yet"), std::string::npos) << text;

  // A column layer handing FP8 to its consumer takes its output's amax in
  // the GEMM: its gather stays whole, and says so.
  const std::string layout =
      "  layout = { tensor_parallel = 4  sequence_parallel = true  overlap = ring }";
  const Spec chain = spec_from(
      "layer a = linear { in = 256  out = 1024  output = fp8  recipe = delayed { history = 4 }\n" +
      layout +
      " column }\nlayer b = linear { in = 1024  out = 256  input = a\n"
      "  recipe = delayed { history = 4 }\n" +
      layout + " row }\n");
  const Plan cp = plan_spec(chain, {4, 512});
  const std::string ct = print_lowered(cp, lower_plan(chain, cp));
  EXPECT_NE(ct.find("a.x.fp8.row's all_gather runs as bulk: its GEMM takes the amax of its whole "
                    "FP8 output"),
            std::string::npos)
      << ct;
}

}  // namespace
}  // namespace fp8c::runtime
