// The generated FP8 GEMM compiles with NVRTC for sm_90a (no GPU needed, so
// this runs in CI): every configuration the heuristic picks for a spread of
// shapes and forms, with no register spills and no wgmma serialized by
// ptxas; and the heuristic's and the description's rules.
#include <gtest/gtest.h>

#include <set>

#include "codegen/kernels/fp8_gemm.hpp"
#include "codegen/kernels/fp8_gemm_heuristic.hpp"
#include "compile_check.hpp"
#include "runtime/nvrtc.hpp"

namespace fp8c::runtime {
namespace {

constexpr int kH200Sms = 132;

// The scalings, as (a_scale_rows, b_scale_rows, fast_accumulate); scale
// rows 32 stands for MXFP8 (1x32 blocks: the kernel's `mx`, scale rows 1).
const std::vector<std::tuple<int, int, bool>> kScalings = {
    {0, 0, true}, {0, 0, false}, {1, 128, false}, {1, 1, false}, {128, 1, false}, {32, 32, false}};

void set_scaling(Fp8GemmKernel& k, const std::tuple<int, int, bool>& s) {
  std::tie(k.a_scale_rows, k.b_scale_rows, k.fast_accumulate) = s;
  k.mx = k.a_scale_rows == 32;
  if (k.mx) k.a_scale_rows = k.b_scale_rows = 1;
}

// The forms the runner serves: type pairs x output types x scalings.
std::vector<Fp8GemmKernel> forms() {
  std::vector<Fp8GemmKernel> out;
  const ElemType e4 = ElemType::e4m3, e5 = ElemType::e5m2;
  for (auto [a, b] : {std::pair{e4, e4}, std::pair{e4, e5}, std::pair{e5, e4}, std::pair{e5, e5}})
    for (ElemType d : {ElemType::bf16, ElemType::fp16, ElemType::fp32})
      for (auto [ar, br, fast] : kScalings) {
        Fp8GemmKernel k;
        k.a = a;
        k.b = b;
        k.d = d;
        set_scaling(k, {ar, br, fast});
        out.push_back(k);
      }
  return out;
}

// Shapes of the table, the examples' layers, and awkward ones.
const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> kShapes = {
    {8192, 8192, 8192}, {16384, 28672, 8192}, {4096, 7168, 16384}, {2048, 8192, 8192},
    {1, 4096, 4096},    {64, 1024, 512},      {127, 200, 400},     {1000, 1056, 4096},
    {8192, 3072, 768},  {8192, 768, 3072},    {768, 3072, 8192}};

bool same_scaling(const Fp8GemmKernel& k, const std::tuple<int, int, bool>& s) {
  Fp8GemmKernel as;
  set_scaling(as, s);
  return std::tuple{k.a_scale_rows, k.b_scale_rows, k.fast_accumulate, k.mx} ==
         std::tuple{as.a_scale_rows, as.b_scale_rows, as.fast_accumulate, as.mx};
}

// What the heuristic picks for one scaling: with e4m3 x e4m3 -> bf16, every
// shape with and without clusters (tile, depth and cluster vary); with every
// other type pair and output type, the widest pick (the instruction and the
// store vary). Split by scaling so each test stays well inside CTest's time
// limit on 2 busy cores.
std::vector<Fp8GemmKernel> chosen_configurations(const std::tuple<int, int, bool>& scaling) {
  std::vector<Fp8GemmKernel> out;
  std::set<std::string> seen;
  const auto add = [&](const Fp8GemmChoice& c) {
    if (seen.insert(c.kernel.name()).second) out.push_back(c.kernel);
  };
  for (const Fp8GemmKernel& form : forms()) {
    if (!same_scaling(form, scaling)) continue;
    const bool common =
        form.a == ElemType::e4m3 && form.b == ElemType::e4m3 && form.d == ElemType::bf16;
    if (!common) {
      add(choose_fp8_gemm({8192, 8192, 8192, form}, kH200Sms));
      continue;
    }
    for (auto [m, n, k] : kShapes)
      for (bool clusters : {false, true}) add(choose_fp8_gemm({m, n, k, form, clusters}, kH200Sms));
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
  bad.accumulate = true;  // an FP8 D read back
  refused(bad);
  bad = k;
  bad.aux = true;  // a pre-activation without an activation
  refused(bad);
  bad = k;
  bad.bias = true;
  bad.bias_type = ElemType::e5m2;
  refused(bad);
  bad = k;
  bad.dact = Activation::gelu;  // no saved pre-activation to read
  refused(bad);
  bad.aux = true;
  bad.bias = true;  // dact is the backward's: no bias beside it
  refused(bad);
  bad.bias = false;
  bad.activation = Activation::relu;  // nor a forward activation
  refused(bad);
  bad = k;
  bad.transposed = true;  // D^T is FP8 only (bf16 D here)
  refused(bad);
  Fp8GemmKernel backward = k;
  backward.d = ElemType::e5m2;
  backward.dact = Activation::gelu;
  backward.aux = true;
  backward.dbias = backward.amax = backward.transposed = true;
  EXPECT_EQ(fp8_gemm_problem(backward), "");
  const std::string source = emit_cuda(backward).source;
  for (const char* constant : {"kDact = true", "kDbias = true", "kTransposed = true"})
    EXPECT_NE(source.find(constant), std::string::npos) << constant;
  EXPECT_NE(backward.name().find("_pre_bf16_dgelu_dbias"), std::string::npos) << backward.name();
  bad = k;
  bad.d = ElemType::bf16;
  bad.aux = true;
  bad.activation = Activation::gelu;
  bad.aux_type = ElemType::e4m3;
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
  bad.a_scale_rows = bad.b_scale_rows = 1;
  bad.block_n = 160;  // block-scaled: its column scales too
  refused(bad);
  bad = k;
  bad.stages = 12;  // 12 x 32 KB
  refused(bad);
  bad = k;
  bad.a_scale_rows = bad.b_scale_rows = 1;
  bad.fast_accumulate = true;
  refused(bad);
  bad = k;
  bad.a_scale_rows = 1;
  bad.b_scale_rows = 128;
  bad.b_scales_k_major = true;  // 128x128 scales have no K-block-major form
  refused(bad);
  bad = k;
  bad.a_scales_k_major = true;  // per-tensor
  refused(bad);
  bad = k;
  bad.block_m = 192;
  refused(bad);
  bad = k;
  bad.block_m = 256;
  bad.stages = 2;
  bad.block_n = 144;  // two waves of 72 accumulators and a partial set: too many
  refused(bad);
  bad = k;
  bad.block_m = 256;
  bad.stages = 2;
  bad.a_scale_rows = bad.b_scale_rows = 1;  // a scale per B column as well
  refused(bad);
  Fp8GemmKernel mx = k;
  mx.a_scale_rows = mx.b_scale_rows = 1;
  mx.mx = true;
  mx.block_n = 112;  // the widest MXFP8 tile that keeps its registers
  EXPECT_EQ(fp8_gemm_problem(mx), "");
  EXPECT_NE(emit_cuda(mx).source.find("constexpr bool kMx = true;"), std::string::npos);
  EXPECT_NE(mx.name(), (Fp8GemmKernel{mx.a, mx.b, mx.d, 1, 1}).name());  // its own cubin
  bad = mx;
  bad.b_scale_rows = 128;  // MXFP8 is 1x32 on both operands
  refused(bad);
  bad = mx;
  bad.a_scales_k_major = true;  // the codes in one order on both operands
  refused(bad);
  Fp8GemmKernel k_major = mx;  // K-block-major codes: the fast form, its own cubin
  k_major.a_scales_k_major = k_major.b_scales_k_major = true;
  EXPECT_EQ(fp8_gemm_problem(k_major), "");
  EXPECT_NE(k_major.name(), mx.name());
  bad = mx;
  bad.block_n = 128;  // the columns' scales for 32 K as well: spills
  refused(bad);
  bad = mx;
  bad.block_n = 96;  // spills too, though narrower
  refused(bad);
  bad = mx;
  bad.block_m = 256;
  bad.stages = 2;
  refused(bad);
}

// 256-row tiles (two waves per math warpgroup) where they measured faster:
// block scaling over 128x128 B blocks, on shapes with more than one 128-row
// tile; never for a 1x128 B (refused) or per-tensor (no faster).
TEST(Fp8GemmHeuristic, TallTilesOnlyForBlockScalingOver128x128Blocks) {
  int tall = 0;
  for (const Fp8GemmKernel& form : forms())
    for (auto [m, n, k] : kShapes) {
      const Fp8GemmKernel c = choose_fp8_gemm({m, n, k, form}, kH200Sms).kernel;
      if (c.block_m != 256) continue;
      ++tall;
      EXPECT_TRUE(form.block_scaled() && form.b_scale_rows == 128) << c.name();
      EXPECT_GT(m, 128) << c.name();
      EXPECT_EQ(c.threads(), 384) << c.name();
    }
  EXPECT_GT(tall, 0);
  Fp8GemmKernel block;
  block.a_scale_rows = 1;
  block.b_scale_rows = 128;
  EXPECT_EQ(choose_fp8_gemm({8192, 8192, 8192, block}, kH200Sms).kernel.block_m, 256);
  EXPECT_EQ(choose_fp8_gemm({100, 8192, 8192, block}, kH200Sms).kernel.block_m, 128);
  // An explicit height (FP8C_GEMM_BLOCK_M) wins, with a width and a ring
  // chosen for it (2304 columns: 144 wide at 128 rows, promoted), for every
  // form that can take it.
  for (const Fp8GemmKernel& form : forms()) {
    Fp8GemmShape forced{2048, 2304, 1024, form};
    forced.block_m = 256;
    const Fp8GemmChoice c = choose_fp8_gemm(forced, kH200Sms);
    EXPECT_EQ(c.kernel.block_m, 256) << c.kernel.name();
    // A 1x128 B cannot take 256 rows at any width: the choice says so.
    EXPECT_EQ(fp8_gemm_problem(c.kernel).empty(), form.b_scale_rows != 1) << c.kernel.name();
  }
}

// This test's instance number ("Name/3" -> "3"): a cache folder per test,
// since CTest runs the scalings' tests side by side.
std::string test_cache_suffix() {
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return name.substr(name.find('/') + 1);
}

class Fp8GemmCompile : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

TEST_P(Fp8GemmCompile, EveryChosenConfigurationCompilesWithoutSpills) {
  std::vector<KernelSource> sources;
  for (const Fp8GemmKernel& k : chosen_configurations(GetParam())) sources.push_back(emit_cuda(k));
  ASSERT_GT(sources.size(), 5u);
  testing::expect_compiles_without_spills(sources,
                                          "fp8c-fp8-gemm-compile-test-" + test_cache_suffix());
}

// `kernels`, and for each with 1x128 scales or MXFP8 codes the same kernel
// reading them K-block-major (16-byte copies), as the executor's layers run
// them.
std::vector<Fp8GemmKernel> with_k_major_scales(std::vector<Fp8GemmKernel> kernels) {
  const std::size_t n = kernels.size();
  for (std::size_t i = 0; i < n; ++i) {
    Fp8GemmKernel k = kernels[i];
    k.a_scales_k_major = k.a_scale_rows == 1;
    k.b_scales_k_major = k.b_scale_rows == 1;
    if (k.a_scales_k_major || k.b_scales_k_major) kernels.push_back(k);
  }
  return kernels;
}

// The fused epilogues the executor asks for (and the rest of each part's
// types), on the widest tile the heuristic picks for the scaling (the most
// accumulators live through the epilogue) and on the narrow M = 1 one.
std::vector<Fp8GemmKernel> epilogue_configurations(const std::tuple<int, int, bool>& scaling) {
  std::vector<Fp8GemmKernel> epilogues;
  const auto add = [&](ElemType d, bool bias, ElemType bias_type, Activation act, bool aux,
                       ElemType aux_type, bool accumulate, bool amax) {
    Fp8GemmKernel k;
    set_scaling(k, scaling);
    k.d = d;
    k.bias = bias;
    k.bias_type = bias_type;
    k.activation = act;
    k.aux = aux;
    k.aux_type = aux_type;
    k.accumulate = accumulate;
    k.amax = amax;
    epilogues.push_back(k);
  };
  const ElemType bf = ElemType::bf16, f16 = ElemType::fp16, f32 = ElemType::fp32;
  add(ElemType::e4m3, true, bf, Activation::gelu, true, bf, false, true);  // fprop, delayed
  add(ElemType::e5m2, true, f32, Activation::relu, true, f32, false, true);
  add(f16, true, f16, Activation::silu, true, f16, false, false);
  add(f32, true, f32, Activation::none, false, bf, true, false);  // wgrad into main grad
  add(bf, false, bf, Activation::none, false, bf, true, true);
  // The forward's FP8 output with its transposed copy (a chained consumer's
  // columnwise operand), and the backward's: act'(z) from the saved
  // pre-activation, dbias, FP8 dz with amax and its transpose; or bf16 dz.
  add(ElemType::e4m3, true, bf, Activation::gelu, true, bf, false, true);
  epilogues.back().transposed = true;
  add(ElemType::e5m2, false, bf, Activation::none, true, bf, false, true);
  epilogues.back().dact = Activation::gelu;
  epilogues.back().dbias = epilogues.back().transposed = true;
  add(bf, false, bf, Activation::none, true, f32, false, false);
  epilogues.back().dact = Activation::silu;
  epilogues.back().dbias = true;
  std::vector<Fp8GemmKernel> out;
  for (const Fp8GemmKernel& form : epilogues)
    for (std::int64_t m : {8192, 1})
      out.push_back(choose_fp8_gemm({m, 8192, 8192, form}, kH200Sms).kernel);
  return out;
}

// ptxas serializes wgmmas it cannot prove safe, and says so only in its log:
// a kernel that still computes the right answer, slowly. The chosen plain
// configurations, and the epilogues that put work inside the K loops (the
// prefetch of what a dact or accumulating epilogue reads).
TEST_P(Fp8GemmCompile, PtxasKeepsTheWgmmasAsynchronous) {
  std::vector<Fp8GemmKernel> kernels;
  for (const Fp8GemmKernel& k : chosen_configurations(GetParam()))
    if (k.a == ElemType::e4m3 && k.b == ElemType::e4m3 && k.d == ElemType::bf16)
      kernels.push_back(k);
  for (const Fp8GemmKernel& k : epilogue_configurations(GetParam()))
    if (k.dact != Activation::none || k.accumulate) kernels.push_back(k);
  for (const Fp8GemmKernel& k : kernels) {
    const KernelSource s = emit_cuda(k);
    const NvrtcOutput out = compile_to_cubin(s.source, s.name, s.entry, "sm_90a", s.options);
    EXPECT_EQ(out.log.find("wgmma"), std::string::npos) << k.name() << ":\n" << out.log;
    EXPECT_EQ(out.spill_stores, 0) << k.name();
  }
}

TEST_P(Fp8GemmCompile, FusedEpiloguesCompileWithoutSpills) {
  std::vector<KernelSource> sources;
  for (const Fp8GemmKernel& k : with_k_major_scales(epilogue_configurations(GetParam()))) {
    EXPECT_EQ(fp8_gemm_problem(k), "") << k.name();
    sources.push_back(emit_cuda(k));
  }
  testing::expect_compiles_without_spills(
      sources, "fp8c-fp8-gemm-epilogue-compile-test-" + test_cache_suffix());
}

// fp8_gemm_problem() caps the tile width by registers (two sets of
// accumulators when promoting): the two widest it accepts for the scaling,
// with the heaviest epilogue, must compile without spills, whatever the
// heuristic picks today.
TEST_P(Fp8GemmCompile, WidestAcceptedTilesCompileWithoutSpills) {
  std::vector<KernelSource> sources;
  Fp8GemmKernel k;
  set_scaling(k, GetParam());
  k.d = ElemType::e4m3;
  k.bias = k.aux = k.amax = k.transposed = true;
  k.activation = Activation::gelu;
  // The `count` widest tiles of `k`'s height that it accepts, each with as
  // many stages as shared memory holds.
  const auto widest_accepted = [](Fp8GemmKernel k, std::size_t count) {
    std::vector<Fp8GemmKernel> out;
    for (int n = 256; n >= 16 && out.size() < count; n -= 16) {
      k.block_n = n;
      k.stages = deepest_ring(k);
      if (fp8_gemm_problem(k).empty()) out.push_back(k);
    }
    return out;
  };
  std::vector<Fp8GemmKernel> widest = widest_accepted(k, 2);
  ASSERT_EQ(widest.size(), 2u);
  // And the widest 256-row tile, where the scaling allows one (two waves of
  // accumulators through the same epilogue).
  k.block_m = 256;
  for (const Fp8GemmKernel& tall : widest_accepted(k, 1)) widest.push_back(tall);
  EXPECT_EQ(widest.size(), k.b_scale_rows == 1 ? 2u : 3u);
  // The backward's heaviest epilogue on the widest tiles as well.
  const std::size_t forward = widest.size();
  for (std::size_t i = 0; i < forward; ++i) {
    Fp8GemmKernel b = widest[i];
    b.bias = false;
    b.activation = Activation::none;
    b.dact = Activation::gelu;
    b.dbias = true;
    b.d = ElemType::e5m2;
    widest.push_back(b);
  }
  for (const Fp8GemmKernel& w : with_k_major_scales(widest)) sources.push_back(emit_cuda(w));
  testing::expect_compiles_without_spills(sources,
                                          "fp8c-fp8-gemm-widest-test-" + test_cache_suffix());
}

// A test name per scaling (a lambda with a structured binding would need
// commas the macro splits on).
std::string scaling_name(const ::testing::TestParamInfo<std::tuple<int, int, bool>>& info) {
  const int a = std::get<0>(info.param), b = std::get<1>(info.param);
  if (a == 0) return std::get<2>(info.param) ? "per_tensor_fast" : "per_tensor";
  if (a == 32) return "mx1x32";
  return "b" + std::to_string(a) + "x" + std::to_string(b);
}

INSTANTIATE_TEST_SUITE_P(Scalings, Fp8GemmCompile, ::testing::ValuesIn(kScalings), scaling_name);

}  // namespace
}  // namespace fp8c::runtime
