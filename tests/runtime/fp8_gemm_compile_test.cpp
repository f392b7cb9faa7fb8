// The generated FP8 GEMM compiles with NVRTC for sm_90a (no GPU needed, so
// this runs in CI): every configuration the heuristic picks for a spread of
// shapes and forms, with no register spills and no wgmma serialized by
// ptxas; and the heuristic's and the description's rules.
#include <gtest/gtest.h>

#include <set>

#include "codegen/kernels/fp8_gemm.hpp"
#include "codegen/kernels/fp8_gemm_heuristic.hpp"
#include "compile_check.hpp"
#include "runtime/jit.hpp"
#include "runtime/nvrtc.hpp"

namespace fp8c::runtime {
namespace {

constexpr int kH200Sms = 132;

// The forms the runner serves: type pairs x output types x scalings.
std::vector<Fp8GemmKernel> forms() {
  std::vector<Fp8GemmKernel> out;
  const ElemType e4 = ElemType::e4m3, e5 = ElemType::e5m2;
  for (auto [a, b] : {std::pair{e4, e4}, std::pair{e4, e5}, std::pair{e5, e4}, std::pair{e5, e5}})
    for (ElemType d : {ElemType::bf16, ElemType::fp16, ElemType::fp32})
      for (auto [ar, br, fast] :
           {std::tuple{0, 0, true}, std::tuple{0, 0, false}, std::tuple{1, 128, false},
            std::tuple{1, 1, false}, std::tuple{128, 1, false}}) {
        Fp8GemmKernel k;
        k.a = a;
        k.b = b;
        k.d = d;
        k.a_scale_rows = ar;
        k.b_scale_rows = br;
        k.fast_accumulate = fast;
        out.push_back(k);
      }
  return out;
}

// Shapes of the table, the examples' layers, and awkward ones.
const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> kShapes = {
    {8192, 8192, 8192}, {16384, 28672, 8192}, {4096, 7168, 16384}, {2048, 8192, 8192},
    {1, 4096, 4096},    {64, 1024, 512},      {127, 200, 400},     {1000, 1056, 4096},
    {8192, 3072, 768},  {8192, 768, 3072},    {768, 3072, 8192}};

std::vector<Fp8GemmKernel> chosen_configurations() {
  std::vector<Fp8GemmKernel> out;
  std::set<std::string> seen;
  for (const Fp8GemmKernel& form : forms())
    for (auto [m, n, k] : kShapes)
      for (bool clusters : {false, true}) {
        const Fp8GemmChoice c = choose_fp8_gemm({m, n, k, form, clusters}, kH200Sms);
        if (seen.insert(c.kernel.name()).second) out.push_back(c.kernel);
      }
  return out;
}

TEST(Fp8GemmHeuristic, ChoicesAreBuildableAndCoverTheGrid) {
  for (const Fp8GemmKernel& form : forms())
    for (auto [m, n, k] : kShapes) {
      const Fp8GemmChoice c = choose_fp8_gemm({m, n, k, form}, kH200Sms);
      SCOPED_TRACE(c.kernel.name() + " for " + std::to_string(m) + "x" + std::to_string(n));
      EXPECT_EQ(fp8_gemm_problem(c.kernel), "");
      EXPECT_EQ(c.kernel.a, form.a);
      EXPECT_EQ(c.kernel.d, form.d);
      EXPECT_EQ(c.kernel.a_scale_rows, form.a_scale_rows);
      EXPECT_EQ(c.kernel.fast_accumulate, form.fast_accumulate);
      const std::int64_t tiles = ((m + c.kernel.block_m - 1) / c.kernel.block_m) *
                                 ((n + c.kernel.block_n - 1) / c.kernel.block_n);
      EXPECT_EQ(c.ctas, std::min<std::int64_t>(tiles, kH200Sms));
      EXPECT_GE(c.tile_group, 1);
      EXPECT_LE(c.kernel.shared_bytes(), kSm90SharedBytes);
      if (m <= 64) {
        EXPECT_EQ(c.kernel.block_m, 64);
      }
    }
}

TEST(Fp8GemmKernelDescription, RefusesWhatTheDeviceCodeCannotBuild) {
  Fp8GemmKernel k;
  EXPECT_EQ(fp8_gemm_problem(k), "");
  const auto refused = [](Fp8GemmKernel bad) {
    EXPECT_NE(fp8_gemm_problem(bad), "") << bad.name();
    EXPECT_THROW(emit_cuda(bad), std::invalid_argument) << bad.name();
  };
  Fp8GemmKernel bad = k;
  bad.a = ElemType::bf16;
  refused(bad);
  bad = k;
  bad.d = ElemType::e4m3;
  refused(bad);
  bad = k;
  bad.a_scale_rows = 1;  // B per-tensor
  refused(bad);
  bad = k;
  bad.block_n = 264;
  refused(bad);
  bad = k;
  bad.block_n = 200;  // promoted: too many accumulators
  refused(bad);
  bad = k;
  bad.stages = 12;  // 12 x 32 KB
  refused(bad);
  bad = k;
  bad.a_scale_rows = bad.b_scale_rows = 1;
  bad.fast_accumulate = true;
  refused(bad);
}

TEST(Fp8GemmCompile, EveryChosenConfigurationCompilesWithoutSpills) {
  std::vector<KernelSource> sources;
  for (const Fp8GemmKernel& k : chosen_configurations()) sources.push_back(emit_cuda(k));
  ASSERT_GT(sources.size(), 10u);
  testing::expect_compiles_without_spills(sources, "fp8c-fp8-gemm-compile-test");
}

// ptxas serializes wgmmas it cannot prove safe, and says so only in its log:
// a kernel that still computes the right answer, slowly.
TEST(Fp8GemmCompile, PtxasKeepsTheWgmmasAsynchronous) {
  for (const Fp8GemmKernel& k : chosen_configurations()) {
    if (k.a != ElemType::e4m3 || k.b != ElemType::e4m3 || k.d != ElemType::bf16) continue;
    const KernelSource s = emit_cuda(k);
    const NvrtcOutput out = compile_to_cubin(s.source, s.name, s.entry, "sm_90a", s.options);
    EXPECT_EQ(out.log.find("wgmma"), std::string::npos) << k.name() << ":\n" << out.log;
    EXPECT_EQ(out.spill_stores, 0) << k.name();
  }
}

}  // namespace
}  // namespace fp8c::runtime
