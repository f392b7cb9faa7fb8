// overlap = ring on CPU ranks: the collectives the lowering makes rings
// (codegen/lower/ring.hpp) go round the ring through ring_shift; what they
// compute is what overlap = none computes, bit for bit for the gathers, and
// for the reduce-scatters the same fp32 sum of the same partials in the
// ring's order, rounded once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>

#include "codegen/lower/ring.hpp"
#include "codegen/plan/planner.hpp"
#include "collectives/narrow_float.hpp"
#include "cpu_test_support.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/cpu/verify.hpp"

namespace fp8c::cpu {
namespace {

using testing::spec_from;

std::string ring_layer(const std::string& recipe, const std::string& mode, int ranks,
                       const std::string& overlap, const std::string& dtype = "bf16") {
  const bool column = mode == "column";
  return "layer l = linear {\n  in = " + std::to_string(column ? 96 : 48 * ranks) +
         "  out = " + std::to_string(column ? 32 * ranks : 80) + "  bias = true  dtype = " + dtype +
         "\n  recipe = " + recipe + "\n  layout = { tensor_parallel = " + std::to_string(ranks) +
         "  sequence_parallel = true  overlap = " + overlap + " } " + mode + "\n}\n";
}

float widen(const std::uint8_t* p, ElemType t) {
  if (t == ElemType::fp32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  std::uint16_t b;
  std::memcpy(&b, p, 2);
  return t == ElemType::bf16 ? collectives::bfloat16_to_float(b) : collectives::float16_to_float(b);
}

std::vector<std::uint8_t> narrow(float v, ElemType t) {
  std::vector<std::uint8_t> out(element_bytes(t));
  if (t == ElemType::fp32) {
    std::memcpy(out.data(), &v, 4);
  } else {
    const std::uint16_t b = t == ElemType::bf16 ? collectives::float_to_bfloat16_rne(v)
                                                : collectives::float_to_float16_rne(v);
    std::memcpy(out.data(), &b, 2);
  }
  return out;
}

struct Case {
  std::string recipe, mode, dtype;
  int ranks;
  // Tokens per rank: 128 makes an FP8 column layer's wgrad read x's
  // columnwise copy by rank segments of K (a gather_k ring); 32 permutes it.
  int per_rank = 32;
};

// Readable parameters in test listings and CTest names, not the case's bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.recipe << " " << c.mode << " " << c.dtype << " ranks " << c.ranks << " tokens/rank "
      << c.per_rank;
}

class CpuRing : public ::testing::TestWithParam<Case> {};

// Every reduce-scatter and all-gather of the pass, captured, under ring and
// none on the same data: gathered tensors identical; each ring
// reduce-scatter's output equal, bit for bit, to the ring-order sum of the
// captured partials (chunk c: ranks c+1, ..., c), rounded once; the layer's
// outputs identical wherever no ring sum feeds them, and every rank's
// results within verify's bounds either way (the oracle below).
TEST_P(CpuRing, RingsComputeWhatNoneComputesInTheRingsOrder) {
  const Case& c = GetParam();
  const Spec ring = spec_from(ring_layer(c.recipe, c.mode, c.ranks, "ring", c.dtype));
  const Spec none = spec_from(ring_layer(c.recipe, c.mode, c.ranks, "none", c.dtype));
  PlanOptions po;
  po.tokens = static_cast<std::uint64_t>(c.per_rank) * static_cast<std::uint64_t>(c.ranks);
  const LayerPlan pr = plan_spec(ring, po).layers.at(0);
  const LayerPlan pn = plan_spec(none, po).layers.at(0);
  ASSERT_EQ(pr.tensors.size(), pn.tensors.size());

  int ring_gathers = 0, ring_scatters = 0;
  ExecutorOptions o;
  o.backend = collectives::Backend::kInProcess;
  std::vector<std::pair<int, int>> scatters;  // (partial, out) of ring reduce-scatters
  for (const auto* pass : {&pr.forward, &pr.backward}) {
    const RingChoice choice = choose_rings(ring.layers[0], pr, *pass);
    for (const Ring& r : choice.rings) {
      const Step& s = (*pass)[static_cast<std::size_t>(r.collective)];
      for (int id : s.inputs()) o.capture.push_back(pr.tensor(id).name);
      for (int id : s.outputs()) o.capture.push_back(pr.tensor(id).name);
      if (const auto* rs = s.as<ReduceScatterStep>()) {
        scatters.emplace_back(rs->in, rs->out);
        ++ring_scatters;
      } else {
        ++ring_gathers;
      }
    }
  }
  // A column layer gathers x for fprop (and x's columnwise copy again where
  // the wgrad reads it by K segments) and sums dx; a row layer sums y (its
  // dy gather feeds two steps: bulk).
  EXPECT_EQ(ring_scatters, 1);
  if (c.mode == "column")
    EXPECT_EQ(ring_gathers, c.per_rank % 128 == 0 && c.recipe != "none" ? 2 : 1);
  else
    EXPECT_EQ(ring_gathers, 0);

  const std::vector<LayerData> data = {random_layer_data(ring.layers[0], po.tokens, 7),
                                       random_layer_data(ring.layers[0], po.tokens, 8)};
  const auto rr = run_layer(ring.layers[0], pr, data, o);
  const auto rn = run_layer(none.layers[0], pn, data, o);
  for (std::size_t step = 0; step < data.size(); ++step) {
    for (int rank = 0; rank < c.ranks; ++rank) {
      const RankStepResult& a = rr[static_cast<std::size_t>(rank)][step];
      const RankStepResult& b = rn[static_cast<std::size_t>(rank)][step];
      for (const std::string& name : o.capture) {
        const bool summed = std::any_of(scatters.begin(), scatters.end(),
                                        [&](auto p) { return pr.tensor(p.second).name == name; });
        if (summed) continue;
        EXPECT_EQ(a.captured.at(name).bytes, b.captured.at(name).bytes)
            << name << " rank " << rank << " step " << step;
      }
      for (const auto& [partial, out] : scatters) {
        const Tensor& t = pr.tensor(out);
        const ElemType type = t.type;
        const std::size_t count = t.elements(), w = element_bytes(type);
        const auto& got = a.captured.at(t.name).bytes;
        ASSERT_EQ(got.size(), count * w);
        for (std::size_t i = 0; i < count; ++i) {
          // Chunk `rank` of every rank's partial, summed from rank + 1 on.
          float sum = 0.0f;
          for (int k = 1; k <= c.ranks; ++k) {
            const int from = (rank + k) % c.ranks;
            const auto& p =
                rr[static_cast<std::size_t>(from)][step].captured.at(pr.tensor(partial).name).bytes;
            const float v =
                widen(p.data() + (static_cast<std::size_t>(rank) * count + i) * w, type);
            sum = k == 1 ? v : sum + v;
          }
          const std::vector<std::uint8_t> want = narrow(sum, type);
          ASSERT_EQ(0, std::memcmp(got.data() + i * w, want.data(), w))
              << t.name << " element " << i << " rank " << rank << " step " << step;
        }
      }
      // What no ring sum feeds is the same either way.
      if (c.mode == "column") {
        EXPECT_EQ(a.y, b.y) << "rank " << rank;
        EXPECT_EQ(a.dw, b.dw) << "rank " << rank;
      } else {
        EXPECT_EQ(a.dx, b.dx) << "rank " << rank;
      }
    }
  }
  // And the oracle's verdict on the ring spec.
  VerifyOptions vo;
  vo.tokens = po.tokens;
  vo.steps = 2;
  const VerifyReport report = verify_spec(ring, vo);
  EXPECT_TRUE(report.passed()) << format_report(report);
}

std::vector<Case> ring_cases() {
  std::vector<Case> v;
  for (const std::string recipe : {"delayed { history = 4 }", "current", "none"})
    for (const std::string mode : {"column", "row"})
      for (int ranks : {2, 3, 4}) v.push_back({recipe, mode, "bf16", ranks});
  v.push_back({"current", "row", "fp16", 4});
  v.push_back({"none", "column", "fp32", 3});
  v.push_back({"current", "column", "bf16", 3, 128});
  v.push_back({"delayed { history = 4 }", "column", "bf16", 2, 128});
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, CpuRing, ::testing::ValuesIn(ring_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return c.recipe.substr(0, c.recipe.find(' ')) + "_" + c.mode + "_" +
                                  c.dtype + "_" + std::to_string(c.ranks) + "_" +
                                  std::to_string(c.per_rank);
                         });

// Over gloo ranks too (processes' transport in one process), at 8 ranks.
TEST(CpuRingGloo, RingSpecVerifiesAtEightRanks) {
  const Spec spec = spec_from(ring_layer("current", "column", 8, "ring") +
                              "layer m = linear {\n  in = 256  out = 80  bias = true\n"
                              "  input = l\n  recipe = current\n  layout = { tensor_parallel = 8"
                              "  sequence_parallel = true  overlap = ring } row\n}\n");
  VerifyOptions vo;
  vo.tokens = 256;
  const VerifyReport report = verify_spec(spec, vo);
  EXPECT_TRUE(report.passed()) << format_report(report);
}

// The ring's bookkeeping: every rank ends with every segment; what a rank
// receives at shift i is what its predecessor sent; a chunk's chain visits
// every rank once and ends at its owner.
TEST(RingArithmetic, GathersAndSumsVisitEveryRankOnce) {
  for (int ranks = 1; ranks <= 9; ++ranks)
    for (int p = 0; p < ranks; ++p) {
      const int prev = (p + ranks - 1) % ranks;
      std::vector<bool> seen(static_cast<std::size_t>(ranks), false);
      EXPECT_EQ(gathered_segment(p, ranks, 0), p);
      for (int i = 0; i < ranks; ++i) {
        seen[static_cast<std::size_t>(gathered_segment(p, ranks, i))] = true;
        if (i + 1 < ranks) {
          EXPECT_EQ(gathered_segment(p, ranks, i + 1), gathered_segment(prev, ranks, i));
        }
        if (i > 0) {
          EXPECT_EQ(scattered_chunk(p, ranks, i), scattered_chunk(prev, ranks, i - 1));
        }
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), true), ranks);
      EXPECT_EQ(scattered_chunk(p, ranks, ranks - 1), p);
    }
}

}  // namespace
}  // namespace fp8c::cpu
