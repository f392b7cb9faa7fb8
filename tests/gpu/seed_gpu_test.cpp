// The two upstream reports (/work/shared/seeds) on the GPU executor, every
// rank on one GPU (single-GPU multi-rank mode): (a) the all-gather of X's
// columnwise FP8 copy along its last physical dim, permuted, is the
// unsharded tensor byte for byte; (b) a column-parallel layer's wgrad with
// sequence parallelism equals the one without, for every recipe. The same
// scenarios over NCCL, one process per GPU, are tests/multigpu.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "../cpu/cpu_test_support.hpp"
#include "../runtime/gpu_fixture.hpp"
#include "codegen/plan/planner.hpp"
#include "runtime/gpu/run_layer.hpp"

namespace fp8c::runtime {
namespace {

using cpu::testing::layer_text;
using cpu::testing::spec_from;
using fp8c::testing::gpu;

LayerPlan plan_of(const Spec& spec, std::uint32_t ranks, std::uint64_t tokens) {
  PlanOptions o;
  o.ranks = ranks;
  o.tokens = tokens;
  return plan_spec(spec, o).layers.at(0);
}

std::vector<std::vector<cpu::RankStepResult>> run(const Spec& spec, const LayerPlan& plan,
                                                  const cpu::LayerData& data,
                                                  std::vector<std::string> capture = {}) {
  GpuRunOptions o;
  o.capture = std::move(capture);
  return run_layer_on_gpu(*gpu().device, *gpu().jit, spec.layers[0], plan, {data}, o);
}

std::vector<float> column_dw(const std::vector<std::vector<cpu::RankStepResult>>& ranks) {
  std::vector<float> dw;
  for (const auto& r : ranks) dw.insert(dw.end(), r[0].dw.begin(), r[0].dw.end());
  return dw;
}

double relative(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return a.size() == b.size() ? std::sqrt(num / den) : INFINITY;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
  return true;
}

TEST(GpuSeedGatherLastDim, PermutedGatherEqualsUnshardedTensor) {
  REQUIRE_GPU();
  for (const std::string recipe : {"current", "mxfp8"}) {
    for (int ranks : {2, 4, 8}) {
      SCOPED_TRACE(recipe + " ranks " + std::to_string(ranks));
      const Spec spec = spec_from(layer_text(recipe, "column", true, ranks, 256, 512));
      const std::uint64_t tokens = 64u * static_cast<std::uint64_t>(ranks);
      const cpu::LayerData data = cpu::random_layer_data(spec.layers[0], tokens, 7);
      const auto rn = run(spec, plan_of(spec, ranks, tokens), data,
                          {"l.x.fp8.col.gathered", "l.x.fp8.col.gathered.permuted",
                           "l.x.fp8.col.scale_inv.gathered.permuted"});
      const auto r1 =
          run(spec, plan_of(spec, 1, tokens), data, {"l.x.fp8.col", "l.x.fp8.col.scale_inv"});
      const auto& whole = r1[0][0].captured.at("l.x.fp8.col");
      for (const auto& rank : rn) {
        const auto& c = rank[0].captured;
        EXPECT_EQ(c.at("l.x.fp8.col.gathered.permuted").bytes, whole.bytes);
        EXPECT_NE(c.at("l.x.fp8.col.gathered").bytes, whole.bytes);  // rank-major: not the tensor
        if (recipe == "mxfp8") {
          EXPECT_EQ(c.at("l.x.fp8.col.scale_inv.gathered.permuted").bytes,
                    r1[0][0].captured.at("l.x.fp8.col.scale_inv").bytes);
        }
      }
    }
  }
}

// With a permute (64 tokens per rank) both runs give cuBLASLt the same
// bytes and shapes: bit for bit. Segment by segment (128 per rank) the
// sequence-parallel wgrad adds four GEMMs of K/4 into fp32: the same
// products summed in another order, within 1e-5 relative.
TEST(GpuSeedSequenceParallelWgrad, EqualsWithoutSequenceParallelForEveryRecipe) {
  REQUIRE_GPU();
  for (const std::string& recipe : cpu::testing::all_recipes()) {
    for (std::uint64_t per_rank : {128u, 64u}) {
      if (per_rank == 64 && recipe == "blockwise") continue;  // blocks straddle the shards
      SCOPED_TRACE(recipe + ", tokens per rank " + std::to_string(per_rank));
      const Spec sp = spec_from(layer_text(recipe, "column", true, 4, 256, 512));
      const Spec no_sp = spec_from(layer_text(recipe, "column", false, 4, 256, 512));
      const std::uint64_t tokens = 4 * per_rank;
      const cpu::LayerData data = cpu::random_layer_data(sp.layers[0], tokens, 11);
      const auto with = run(sp, plan_of(sp, 4, tokens), data);
      const auto without = run(no_sp, plan_of(no_sp, 4, tokens), data);
      const auto a = column_dw(with), b = column_dw(without);
      const bool segmented = plan_of(sp, 4, tokens).find("l.x.fp8.col.gathered") != nullptr &&
                             plan_of(sp, 4, tokens).find("l.x.fp8.col.gathered")->segmented;
      if (segmented || recipe == "none" || recipe == "blockwise")
        EXPECT_LT(relative(a, b), 1e-5);
      else
        EXPECT_TRUE(bit_equal(a, b)) << "relative difference " << relative(a, b);
      EXPECT_TRUE(bit_equal(with[1][0].y, without[1][0].y));
    }
  }
}

}  // namespace
}  // namespace fp8c::runtime
