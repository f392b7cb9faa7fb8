// The generated FP8 GEMM (runtime/gemm/generated_gemm.hpp) on the GPU
// against the float64 reference of the operands as stored, the same problems
// and tolerance as cuBLASLt's tests (gemm_problem.hpp, gemm_reference.hpp):
// every FP8 type pairing, fast and promoted accumulation, bf16/fp16/fp32 D,
// every fused epilogue (bias, activation with aux, accumulation, FP8 D with
// saturation and amax), the backward's (act' from a saved pre-activation,
// dbias, FP8 D's transposed copy),
// block scaling in every pairing and scale order, MXFP8 (1x32 E8M0 codes)
// with every type pairing and epilogue, M of 1, 64 and 127, shapes
// that are not tile multiples, padded leading dimensions, more tiles than
// SMs. The SASS must hold the FP8 warpgroup MMA and TMA loads. Skipped,
// visibly, without a GPU (the SASS test: without cuobjdump).
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "codegen/kernels/fp8_gemm.hpp"
#include "gemm_problem.hpp"
#include "runtime/gemm/generated_gemm.hpp"

namespace fp8c::runtime {
namespace {

using namespace gemm_test;

// Never destroyed, like the fixture's context. `clusters`: a runner whose
// heuristic may pick clusters of two (the default one does not).
GeneratedGemmRunner& runner(bool clusters = false) {
  static GeneratedGemmRunner* plain = nullptr;
  static GeneratedGemmRunner* clustered = nullptr;
  GeneratedGemmRunner*& instance = clusters ? clustered : plain;
  if (!instance) instance = make_generated_gemm_runner(*testing::gpu().jit, clusters).release();
  return *instance;
}

bool hopper() {
  return testing::gpu().device->arch() == "sm_90a";
}

#define REQUIRE_HOPPER()                                              \
  do {                                                                \
    REQUIRE_GPU();                                                    \
    if (!hopper())                                                    \
      GTEST_SKIP() << "the generated GEMM needs sm_90a; this GPU is " \
                   << testing::gpu().device->arch();                  \
  } while (0)

// M of 1, 64, 127; N and K that no tile divides (K % 128 = 16); padded
// leading dimensions; more tiles than the H200's 132 SMs; clusters of two
// (when a runner allows them) whose last pair has a tile below M (1100
// rows: 9 tile rows).
const std::vector<Shape> kShapes = {{1, 256, 512},       {64, 200, 384},     {127, 392, 400},
                                    {264, 768, 384, 32}, {1000, 1056, 4096}, {2048, 2304, 1024},
                                    {1100, 520, 272}};

Form per_tensor(ElemType a, ElemType b, ElemType d, bool fast) {
  Form f;
  f.name = std::string(to_string(a)) + " x " + std::string(to_string(b)) + " -> " +
           std::string(to_string(d)) + (fast ? " fast" : " promoted");
  f.a = a;
  f.b = b;
  f.d = d;
  f.fast_accumulate = fast;
  return f;
}

TEST(GeneratedGemmGpu, PerTensorTypePairs) {
  REQUIRE_HOPPER();
  const ElemType e4 = ElemType::e4m3, e5 = ElemType::e5m2;
  std::uint32_t seed = 501;
  for (auto [a, b] : {std::pair{e4, e4}, std::pair{e4, e5}, std::pair{e5, e4}, std::pair{e5, e5}})
    for (bool fast : {true, false})
      for (const Shape& s : kShapes) {
        Problem p = make_problem(per_tensor(a, b, ElemType::bf16, fast), s, seed++);
        run_and_check(runner(), p);
      }
}

TEST(GeneratedGemmGpu, PerTensorOutputTypes) {
  REQUIRE_HOPPER();
  std::uint32_t seed = 601;
  for (ElemType d : {ElemType::fp16, ElemType::fp32})
    for (bool fast : {true, false})
      for (const Shape& s : kShapes) {
        Problem p = make_problem(per_tensor(ElemType::e4m3, ElemType::e4m3, d, fast), s, seed++);
        run_and_check(runner(), p);
      }
}

TEST(GeneratedGemmGpu, BlockScaledPairingsAndOrders) {
  REQUIRE_HOPPER();
  const Scaling row = Scaling::block_1x128, tile = Scaling::block_128x128;
  std::uint32_t seed = 701;
  for (auto [a, b] : {std::pair{row, tile}, std::pair{row, row}, std::pair{tile, row}})
    for (BlockScaleOrder order : {BlockScaleOrder::k_block_major, BlockScaleOrder::row_major})
      for (const Shape& s : kShapes) {
        if (s.pad) continue;  // block problems keep ld = K
        Problem p = make_block_problem(a, b, s, seed++, 0, false, order);
        run_and_check(runner(), p);
      }
}

// Tile widths that do not divide 128 over a 128x128-scaled B: a tile spans
// two 128-column blocks and reads two scales (fp8_gemm_sm90.cuh's
// kTwoBScales), N past the last tile's second block included.
TEST(GeneratedGemmGpu, BlockScaledTilesAcrossTwoColumnBlocks) {
  REQUIRE_HOPPER();
  const Scaling row = Scaling::block_1x128, tile = Scaling::block_128x128;
  std::uint32_t seed = 751;
  for (int width : {160, 144, 96}) {
    ::setenv("FP8C_GEMM_BLOCK_N", std::to_string(width).c_str(), 1);
    const auto sized = make_generated_gemm_runner(*testing::gpu().jit);
    ::unsetenv("FP8C_GEMM_BLOCK_N");
    for (const Shape& s : {Shape{256, 520, 384}, Shape{130, 1000, 272}, Shape{1100, 1056, 1024}})
      for (BlockScaleOrder order : {BlockScaleOrder::k_block_major, BlockScaleOrder::row_major}) {
        Problem p = make_block_problem(row, tile, s, seed++, 0, false, order);
        ASSERT_EQ(sized->choice(p.args).kernel.block_n, width);
        run_and_check(*sized, p);
      }
  }
}

// 128x128 scale rows padded past ceil(K / 128) blocks, as the lowering stores
// them for cuBLASLt (GemmOperand::scale_stride).
TEST(GeneratedGemmGpu, BlockScaledPaddedScaleRows) {
  REQUIRE_HOPPER();
  const Scaling row = Scaling::block_1x128, tile = Scaling::block_128x128;
  std::uint32_t seed = 801;
  for (auto [a, b] : {std::pair{row, tile}, std::pair{tile, row}})
    for (const Shape& s : {Shape{256, 384, 640}, Shape{384, 256, 384}}) {
      const std::int64_t nb = (s.k + 127) / 128;
      Problem p = make_block_problem(a, b, s, seed++, (nb + 3) / 4 * 4, false);
      run_and_check(runner(), p);
    }
}

// Shapes on which the heuristic picks different tile widths, heights, depths
// and cluster sizes (the GPU tests above mostly land on a few).
TEST(GeneratedGemmGpu, HeuristicPicksAreExercised) {
  REQUIRE_HOPPER();
  std::uint32_t seed = 901;
  std::set<std::string> seen;
  // 2560 and 2304 columns: the promoted 160- and 144-wide tiles.
  for (const Shape& s : {Shape{4096, 4096, 256}, Shape{2048, 1280, 256}, Shape{1024, 768, 256},
                         Shape{256, 96, 256}, Shape{33, 4096, 256}, Shape{1100, 520, 272},
                         Shape{2048, 2560, 256}, Shape{2048, 2304, 384}})
    for (bool fast : {true, false})
      for (bool clusters : {false, true}) {
        Problem p = make_problem(per_tensor(ElemType::e4m3, ElemType::e4m3, ElemType::bf16, fast),
                                 s, seed++);
        seen.insert(runner(clusters).choice(p.args).kernel.name());
        run_and_check(runner(clusters), p);
      }
  // Clusters of two with block scales, the last pair's second tile below M.
  for (const Shape& s : {Shape{1100, 520, 272}, Shape{512, 384, 1024}}) {
    Problem p =
        make_block_problem(Scaling::block_1x128, Scaling::block_128x128, s, seed++, 0, false);
    seen.insert(runner(true).choice(p.args).kernel.name());
    run_and_check(runner(true), p);
  }
  EXPECT_GE(seen.size(), 6u);
  for (const char* tile : {"_pt_128x160_", "_pt_128x144_"})
    EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [&](const std::string& name) {
      return name.find(tile) != std::string::npos;
    })) << tile;
  bool clustered = false, single = false;
  for (const auto& name : seen) (name.find("_c2") != std::string::npos ? clustered : single) = true;
  EXPECT_TRUE(clustered && single);
}

// A form with an epilogue: `name` says which.
Form with_epilogue(const std::string& name, ElemType a, ElemType b, ElemType d, ElemType bias,
                   Activation act, bool aux, ElemType aux_type, bool amax) {
  Form f;
  f.name = std::string(to_string(a)) + " x " + std::string(to_string(b)) + " -> " + name;
  f.a = a;
  f.b = b;
  f.d = d;
  f.bias = true;
  f.bias_type = bias;
  f.gelu = act == Activation::gelu;
  f.activation = act;
  f.aux = aux;
  f.aux_type = aux_type;
  f.amax = amax;
  return f;
}

// The epilogues a layer's GEMMs fuse: bias of each type, each activation
// with its pre-activation kept, FP8 D with its scale and amax.
std::vector<Form> epilogue_forms() {
  const ElemType e4 = ElemType::e4m3, e5 = ElemType::e5m2, bf = ElemType::bf16,
                 f16 = ElemType::fp16, f32 = ElemType::fp32;
  return {
      with_epilogue("e4m3 + bf16 bias, gelu, bf16 aux, amax", e4, e4, e4, bf, Activation::gelu,
                    true, bf, true),
      with_epilogue("e5m2 + fp32 bias, relu, fp32 aux, amax", e4, e5, e5, f32, Activation::relu,
                    true, f32, true),
      with_epilogue("fp16 + fp16 bias, silu, fp16 aux", e5, e4, f16, f16, Activation::silu, true,
                    f16, false),
      with_epilogue("bf16 + bf16 bias, gelu", e4, e4, bf, bf, Activation::gelu, false, bf, false),
      with_epilogue("fp32 + fp32 bias, amax", e5, e5, f32, f32, Activation::none, false, bf, true),
  };
}

TEST(GeneratedGemmGpu, PerTensorFusedEpilogues) {
  REQUIRE_HOPPER();
  std::uint32_t seed = 801;
  for (Form f : epilogue_forms())
    for (bool fast : {true, false}) {
      f.fast_accumulate = fast;
      for (const Shape& s : kShapes) {
        Problem p = make_problem(f, s, seed++);
        run_and_check(runner(), p);
      }
    }
}

TEST(GeneratedGemmGpu, BlockScaledFusedEpilogues) {
  REQUIRE_HOPPER();
  std::uint32_t seed = 851;
  const Scaling s1 = Scaling::block_1x128, s128 = Scaling::block_128x128;
  for (const Form& f : epilogue_forms())
    for (auto [a, b] : {std::pair{s1, s128}, std::pair{s1, s1}})
      for (const Shape& s : {kShapes[0], kShapes[2], kShapes[4]}) {
        Problem p = make_block_problem(a, b, s, seed++, 0, f.bias, BlockScaleOrder::row_major, &f);
        run_and_check(runner(), p);
      }
}

// 256-row tiles: each math warpgroup computes two 64-row waves of the tile
// (rows 64 w + 128 v), the second partly or wholly below M on most of these
// shapes; per-tensor fast and promoted, block-scaled over 128x128 B blocks in
// both scale orders, the fused epilogues, and clusters of two whose last
// pair's second tile lies below M (2200 rows: 9 tiles of 256).
TEST(GeneratedGemmGpu, TallTilesComputeTwoWavesPerWarpgroup) {
  REQUIRE_HOPPER();
  ::setenv("FP8C_GEMM_BLOCK_M", "256", 1);
  const auto tall = make_generated_gemm_runner(*testing::gpu().jit);
  const auto tall_clustered = make_generated_gemm_runner(*testing::gpu().jit, true);
  ::unsetenv("FP8C_GEMM_BLOCK_M");
  std::uint32_t seed = 771;
  const auto check = [&](GeneratedGemmRunner& r, Problem& p) {
    ASSERT_EQ(r.choice(p.args).kernel.block_m, 256) << p.form.name;
    run_and_check(r, p);
  };
  for (auto [a, b] :
       {std::pair{ElemType::e4m3, ElemType::e4m3}, std::pair{ElemType::e5m2, ElemType::e4m3}})
    for (bool fast : {true, false})
      for (const Shape& s : kShapes) {
        Problem p = make_problem(per_tensor(a, b, ElemType::bf16, fast), s, seed++);
        check(*tall, p);
      }
  const Scaling row = Scaling::block_1x128, tile = Scaling::block_128x128;
  for (BlockScaleOrder order : {BlockScaleOrder::k_block_major, BlockScaleOrder::row_major})
    for (const Shape& s : kShapes) {
      if (s.pad) continue;  // block problems keep ld = K
      Problem p = make_block_problem(row, tile, s, seed++, 0, false, order);
      check(*tall, p);
    }
  for (Form f : epilogue_forms()) {
    f.fast_accumulate = false;
    for (const Shape& s : {kShapes[2], kShapes[4]}) {
      Problem p = make_problem(f, s, seed++);
      check(*tall, p);
      Problem q =
          make_block_problem(row, tile, s, seed++, 0, f.bias, BlockScaleOrder::row_major, &f);
      check(*tall, q);
    }
  }
  for (const Shape& s : {Shape{2200, 520, 272}, Shape{2048, 2304, 1024}}) {
    Problem p = make_block_problem(row, tile, s, seed++, 0, false);
    ASSERT_EQ(tall_clustered->choice(p.args).kernel.cluster_m, 2);
    check(*tall_clustered, p);
    Problem q =
        make_problem(per_tensor(ElemType::e4m3, ElemType::e4m3, ElemType::bf16, true), s, seed++);
    check(*tall_clustered, q);
  }
}

// D += A.B^T (+ bias): a plain run then an accumulating one leaves twice the
// product, in fp32 (a main grad) and in bf16.
TEST(GeneratedGemmGpu, AccumulateAddsIntoD) {
  REQUIRE_HOPPER();
  std::uint32_t seed = 901;
  for (ElemType d : {ElemType::fp32, ElemType::bf16})
    for (bool fast : {true, false}) {
      Form f = per_tensor(ElemType::e4m3, ElemType::e5m2, d, fast);
      f.bias = true;
      f.bias_type = ElemType::fp32;
      f.name += " + bias, accumulate";
      for (const Shape& s : {kShapes[2], kShapes[3], kShapes[4]}) {
        Problem p = make_problem(f, s, seed++);
        SCOPED_TRACE(describe(f, s));
        Stream stream;
        poison(p, stream.get());
        runner().run(p.args, stream.get());
        GemmArgs again = p.args;
        again.accumulate = true;
        std::string why;
        ASSERT_TRUE(runner().supports(again, &why)) << why;
        runner().run(again, stream.get());
        stream.synchronize();
        // The bias is added by each run, so the reference doubles as a whole.
        check(p, 2.0);
      }
    }
}

// Segmented K (a wgrad walking rank segments): two accumulating calls on
// sub-pointers along K equal one call over all of K.
TEST(GeneratedGemmGpu, SegmentedKEqualsOneCall) {
  REQUIRE_HOPPER();
  const Form f = per_tensor(ElemType::e4m3, ElemType::e5m2, ElemType::fp32, false);
  const Shape s{256, 520, 1024};
  Problem p = make_problem(f, s, 13);
  Stream stream;
  poison(p, stream.get());
  runner().run(p.args, stream.get());
  stream.synchronize();
  check(p);
  const auto whole = download<float>(p.dd, static_cast<std::size_t>(s.m * s.n));

  const std::int64_t split = 400;  // not a whole K block: the first call's last block is partial
  GemmArgs first = p.args, second = p.args;
  first.a.k = first.b.k = split;
  second.a.k = second.b.k = s.k - split;
  second.a.data += split;
  second.b.data += split;
  second.accumulate = true;
  poison(p, stream.get());
  runner().run(first, stream.get());
  runner().run(second, stream.get());
  stream.synchronize();
  check(p);
  const auto segmented = download<float>(p.dd, whole.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < whole.size(); ++i)
    if (!(std::fabs(segmented[i] - whole[i]) <= 2 * testing::kAccumulationEps * p.ref.abs_sum[i]))
      ++bad;
  EXPECT_EQ(bad, 0u) << "segmented and whole-K results differ beyond two accumulation bounds";
}

// fp8(D * d_scale) saturates at the format's largest value (not Inf, not
// NaN), and the amax is of D before scaling, written over whatever the
// amax slot held.
TEST(GeneratedGemmGpu, Fp8OutputSaturatesAndReportsAmax) {
  REQUIRE_HOPPER();
  for (ElemType out : {ElemType::e4m3, ElemType::e5m2}) {
    Form f = per_tensor(ElemType::e4m3, ElemType::e5m2, out, true);
    f.amax = true;
    f.name += ", saturating, amax";
    Problem p = make_problem(f, kShapes[4], 17);
    p.d_scale *= 4;  // everything above 1/4 of the largest |D| overflows
    p.scalars.upload(&p.d_scale, 4, kDScaleAt);
    run_and_check(runner(), p);
  }
}

// MXFP8 (1x32 E8M0 codes), every type pairing, on every shape: K of 400 and
// 272 leave code rows of 13 and 9 bytes (read byte by byte), the others
// whole words (copied ahead with cp.async).
TEST(GeneratedGemmGpu, MxEveryTypePairing) {
  REQUIRE_HOPPER();
  const ElemType e4 = ElemType::e4m3, e5 = ElemType::e5m2;
  std::uint32_t seed = 1101;
  for (auto [a, b] : {std::pair{e4, e4}, std::pair{e4, e5}, std::pair{e5, e4}, std::pair{e5, e5}})
    for (const Shape& s : kShapes)
      for (BlockScaleOrder order : {BlockScaleOrder::row_major, BlockScaleOrder::k_block_major}) {
        if (s.pad) continue;
        Problem p = make_mx_problem(s, seed++, a, b, 0, nullptr, order);
        const Fp8GemmKernel k = runner().choice(p.args).kernel;
        ASSERT_TRUE(k.mx);
        ASSERT_EQ(k.a_scales_k_major, order == BlockScaleOrder::k_block_major);
        run_and_check(runner(), p);
      }
}

// Code rows longer than ceil(K / 32) (a K range of a wider operand, as the
// executor reads a rank segment), padded with NaN codes that must not be
// read: unaligned (+3) and aligned (+4) strides.
TEST(GeneratedGemmGpu, MxPaddedCodeRows) {
  REQUIRE_HOPPER();
  std::uint32_t seed = 1151;
  for (const Shape& s : {Shape{256, 384, 640}, Shape{130, 1000, 272}, Shape{1100, 1056, 1024}})
    for (std::int64_t extra : {3, 4}) {
      Problem p =
          make_mx_problem(s, seed++, ElemType::e4m3, ElemType::e4m3, (s.k + 31) / 32 + extra);
      run_and_check(runner(), p);
    }
  // K-block-major: rows of codes (one per 32 K) longer than M and N, by 3
  // (unaligned: read byte by byte) and to the next multiple of 16 and 16
  // more (16-byte copies).
  for (const Shape& s : {Shape{256, 384, 640}, Shape{130, 1000, 272}, Shape{1100, 1056, 1024}}) {
    const std::int64_t rows = std::max(s.m, s.n);
    for (std::int64_t stride : {rows + 3, (rows + 15) / 16 * 16 + 16}) {
      Problem p = make_mx_problem(s, seed++, ElemType::e4m3, ElemType::e4m3, stride, nullptr,
                                  BlockScaleOrder::k_block_major);
      run_and_check(runner(), p);
    }
  }
}

// The backward's epilogues and the transposed FP8 D: act'(z) from a saved
// pre-activation in each aux type, dbias in each type (its workspace
// poisoned: every partial row must be written), FP8 D with amax and its
// transpose (bit for bit D's), and the forward's FP8 output with its
// transpose; per-tensor fast and promoted, block-scaled, MXFP8, and 256-row
// tiles (two waves of 16-row partials per warp).
std::vector<Form> backward_forms() {
  const ElemType e4 = ElemType::e4m3, e5 = ElemType::e5m2, bf = ElemType::bf16,
                 f16 = ElemType::fp16, f32 = ElemType::fp32;
  const auto backward = [](const std::string& name, ElemType a, ElemType b, ElemType d,
                           Activation dact, ElemType pre, bool dbias, ElemType dbias_type,
                           bool amax, bool transposed) {
    Form f;
    f.name = std::string(to_string(a)) + " x " + std::string(to_string(b)) + " -> " + name;
    f.a = a;
    f.b = b;
    f.d = d;
    f.dact = dact;
    f.aux = dact != Activation::none;
    f.aux_type = pre;
    f.dbias = dbias;
    f.dbias_type = dbias_type;
    f.amax = amax;
    f.transposed = transposed;
    return f;
  };
  Form forward = with_epilogue("e4m3 + bf16 bias, gelu, bf16 aux, amax, D^T", e4, e4, e4, bf,
                               Activation::gelu, true, bf, true);
  forward.transposed = true;
  return {
      backward("e5m2 dgelu(bf16 z), fp32 dbias, amax, D^T", e4, e5, e5, Activation::gelu, bf, true,
               f32, true, true),
      backward("bf16 drelu(fp32 z), bf16 dbias", e5, e4, bf, Activation::relu, f32, true, bf, false,
               false),
      backward("fp16 dsilu(fp16 z), fp16 dbias, amax", e4, e4, f16, Activation::silu, f16, true,
               f16, true, false),
      backward("fp32, fp32 dbias", e4, e4, f32, Activation::none, bf, true, f32, false, false),
      backward("e4m3 dgelu(bf16 z), D^T", e4, e4, e4, Activation::gelu, bf, false, f32, false,
               true),
      forward,
  };
}

TEST(GeneratedGemmGpu, BackwardEpiloguesAndTransposedD) {
  REQUIRE_HOPPER();
  std::uint32_t seed = 1101;
  const std::vector<Form> forms = backward_forms();
  for (std::size_t i = 0; i < forms.size(); ++i) {
    Form f = forms[i];
    // The first form on every shape; the others on the edges (M of 1 and
    // 127, padded leading dimensions, a cluster's tile below M) and one
    // shape of many tiles, so that the float64 reference (CPU time beside
    // the other shards in bench/gpu.sh) stays a fraction of the test run.
    const std::vector<Shape> shapes =
        i == 0 ? kShapes : std::vector<Shape>{kShapes[0], kShapes[2], kShapes[3], kShapes[6]};
    const std::vector<Shape> scaled = i < 2
                                          ? std::vector<Shape>{kShapes[0], kShapes[2], kShapes[4]}
                                          : std::vector<Shape>{kShapes[0], kShapes[2], kShapes[6]};
    for (bool fast : {true, false}) {
      f.fast_accumulate = fast;
      for (const Shape& s : shapes) {
        Problem p = make_problem(f, s, seed++);
        run_and_check(runner(), p);
      }
    }
    f.fast_accumulate = false;
    const Scaling s1 = Scaling::block_1x128, s128 = Scaling::block_128x128;
    for (const Shape& s : scaled) {
      Problem p = make_block_problem(s1, s128, s, seed++, 0, false, BlockScaleOrder::row_major, &f);
      run_and_check(runner(), p);
      Problem q = make_mx_problem(s, seed++, f.a, f.b, 0, &f);
      run_and_check(runner(), q);
    }
  }
  ::setenv("FP8C_GEMM_BLOCK_M", "256", 1);
  const auto tall = make_generated_gemm_runner(*testing::gpu().jit);
  ::unsetenv("FP8C_GEMM_BLOCK_M");
  for (const Form& f : forms)
    for (const Shape& s : {kShapes[2], Shape{2200, 520, 272}}) {
      Problem p = make_block_problem(Scaling::block_1x128, Scaling::block_128x128, s, seed++, 0,
                                     false, BlockScaleOrder::row_major, &f);
      ASSERT_EQ(tall->choice(p.args).kernel.block_m, 256) << p.form.name;
      run_and_check(*tall, p);
    }
}

// The same dbias twice from the same inputs: the partials are added in one
// fixed order, so the bits repeat (no atomics).
TEST(GeneratedGemmGpu, DbiasIsDeterministic) {
  REQUIRE_HOPPER();
  Form f = backward_forms()[0];
  Problem p = make_problem(f, Shape{2048, 2304, 1024}, 1191);
  run_and_check(runner(), p);
  const auto first = download<float>(p.ddbias, 2304);
  for (int again = 0; again < 3; ++again) {
    Stream stream;
    poison(p, stream.get());
    runner().run(p.args, stream.get());
    stream.synchronize();
    const auto bits = download<float>(p.ddbias, 2304);
    EXPECT_EQ(std::memcmp(bits.data(), first.data(), bits.size() * 4), 0) << "run " << again;
  }
}

// What the backward's epilogue needs, refused by name: dact without the
// pre-activation, dbias without its workspace, a transposed bf16 D, and
// cuBLASLt's runner refusing all three.
TEST(GeneratedGemmGpu, BackwardEpilogueArgumentsAreChecked) {
  REQUIRE_HOPPER();
  Problem p = make_problem(backward_forms()[0], Shape{64, 200, 384}, 1195);
  const auto refused = [&](GemmArgs g, const std::string& says) {
    std::string why;
    EXPECT_FALSE(runner().supports(g, &why)) << says;
    EXPECT_NE(why.find(says), std::string::npos) << why;
    Stream stream;
    EXPECT_THROW(runner().run(g, stream.get()), std::invalid_argument) << says;
  };
  GemmArgs g = p.args;
  g.aux = 0;
  refused(g, "pre-activation");
  g = p.args;
  g.dbias_workspace = 0;
  refused(g, "dbias_workspace");
  // A bf16 D of its own: in the problem's FP8 D, two-byte elements would
  // run into the saved pre-activation, a refusal of its own.
  const DeviceBuffer bf16_d(static_cast<std::size_t>(p.args.a.rows) * p.args.ldd * 2);
  g = p.args;
  g.d = bf16_d.get();
  g.d_type = ElemType::bf16;
  g.d_scale = 0;
  refused(g, "FP8 only");
  g = p.args;
  g.ld_dt = 63;
  refused(g, "at least M");
  const auto cublaslt = make_cublaslt_runner();
  std::string why;
  EXPECT_FALSE(cublaslt->supports(p.args, &why));
  EXPECT_NE(why.find("generated GEMM only"), std::string::npos) << why;
}

TEST(GeneratedGemmGpu, MxFusedEpilogues) {
  REQUIRE_HOPPER();
  std::uint32_t seed = 1201;
  for (const Form& f : epilogue_forms()) {
    for (const Shape& s : {kShapes[0], kShapes[2], kShapes[4]}) {
      Problem p = make_mx_problem(s, seed++, f.a, f.b, 0, &f);
      run_and_check(runner(), p);
    }
    Problem p =
        make_mx_problem(kShapes[2], seed++, f.a, f.b, 0, &f, BlockScaleOrder::k_block_major);
    run_and_check(runner(), p);
  }
}

// Every MXFP8 tile the description accepts, 64 and 128 rows: the scale
// warps split a stage's A rows and B column pairs over their 96 lanes
// differently for each (one item a lane at 64 x 64, two at 128 x 112), and
// the edges of M and N fall inside a tile; K of 272 leaves code rows of 9
// bytes (read byte by byte). The same with K-block-major codes, whose one
// warp takes a stage's 16-row chunks (24 to 60 of them), rows of codes
// padded to a multiple of 16 (16-byte copies, the edges of M and N inside a
// chunk).
TEST(GeneratedGemmGpu, MxEveryTileShape) {
  REQUIRE_HOPPER();
  std::uint32_t seed = 1301;
  for (int rows : {64, 128})
    for (int width : {64, 80, 112, 128}) {
      Fp8GemmKernel k;
      k.a_scale_rows = k.b_scale_rows = 1;
      k.mx = true;
      k.block_m = rows;
      k.block_n = width;
      if (!fp8_gemm_problem(k).empty()) continue;  // a width the description refuses
      ::setenv("FP8C_GEMM_BLOCK_N", std::to_string(width).c_str(), 1);
      ::setenv("FP8C_GEMM_BLOCK_M", std::to_string(rows).c_str(), 1);
      const auto sized = make_generated_gemm_runner(*testing::gpu().jit);
      ::unsetenv("FP8C_GEMM_BLOCK_N");
      ::unsetenv("FP8C_GEMM_BLOCK_M");
      for (const Shape& s : {Shape{200, 520, 1024}, Shape{130, 1000, 272}, Shape{1, 136, 384}})
        for (BlockScaleOrder order : {BlockScaleOrder::row_major, BlockScaleOrder::k_block_major}) {
          const bool k_major = order == BlockScaleOrder::k_block_major;
          const std::int64_t pitch = k_major ? (std::max(s.m, s.n) + 15) / 16 * 16 : 0;
          Problem p =
              make_mx_problem(s, seed++, ElemType::e4m3, ElemType::e4m3, pitch, nullptr, order);
          const Fp8GemmKernel chosen = sized->choice(p.args).kernel;
          ASSERT_EQ(chosen.block_n, width);
          ASSERT_EQ(chosen.block_m, rows);
          ASSERT_EQ(chosen.a_scales_k_major, k_major);
          run_and_check(*sized, p);
        }
    }
}

// A NaN code (0xFF) poisons its block's products and nothing else: the row
// of A (or the column of B) whose block it scales comes out NaN, every other
// element finite and right.
TEST(GeneratedGemmGpu, MxNanCodePoisonsItsRowOrColumnOnly) {
  REQUIRE_HOPPER();
  const Shape s{200, 264, 512};
  const std::int64_t codes = s.k / 32;
  const std::int64_t pitch = 272;  // K-block-major rows of codes: 16-byte copies
  for (BlockScaleOrder order : {BlockScaleOrder::row_major, BlockScaleOrder::k_block_major})
    for (bool in_a : {true, false})
      for (std::int64_t at : {std::int64_t{77}, std::int64_t{5}, (in_a ? s.m : s.n) - 1}) {
        const bool k_major = order == BlockScaleOrder::k_block_major;
        SCOPED_TRACE(k_major ? "codes K-block-major" : "codes row-major");
        Problem p = make_mx_problem(s, 1251, ElemType::e4m3, ElemType::e4m3, k_major ? pitch : 0,
                                    nullptr, order);
        DeviceBuffer& scales = in_a ? p.a_scales : p.b_scales;
        std::vector<unsigned char> bytes(
            static_cast<std::size_t>(k_major ? codes * pitch : (in_a ? s.m : s.n) * codes));
        scales.download(bytes.data(), bytes.size());
        bytes[static_cast<std::size_t>(k_major ? 5 * pitch + at : at * codes + 5)] = 0xFF;
        scales.upload(bytes.data(), bytes.size());
        Stream stream;
        poison(p, stream.get());
        runner().run(p.args, stream.get());
        stream.synchronize();
        const auto d = download<unsigned char>(p.dd, p.d_bytes());
        std::size_t nan_in_line = 0, nan_elsewhere = 0;
        for (std::int64_t i = 0; i < s.m; ++i)
          for (std::int64_t j = 0; j < s.n; ++j) {
            const bool nan = std::isnan(decode(p.form.d, &d[(i * p.args.ldd + j) * 2]));
            ((in_a ? i : j) == at ? nan_in_line : nan_elsewhere) += nan ? 1 : 0;
          }
        EXPECT_EQ(nan_in_line, static_cast<std::size_t>(in_a ? s.n : s.m))
            << (in_a ? "A row " : "B column ") << at;
        EXPECT_EQ(nan_elsewhere, 0u) << (in_a ? "A row " : "B column ") << at;
      }
}

TEST(GeneratedGemmGpu, RefusedFormsSayWhyAndThrow) {
  REQUIRE_HOPPER();
  Problem p = make_problem(per_tensor(ElemType::e4m3, ElemType::e4m3, ElemType::bf16, true),
                           kShapes[1], 37);
  std::string why;
  EXPECT_TRUE(runner().supports(p.args, &why)) << why;
  const auto refused = [&](GemmArgs g, const std::string& says) {
    EXPECT_FALSE(runner().supports(g, &why));
    EXPECT_NE(why.find(says), std::string::npos) << why;
    EXPECT_THROW(runner().run(g, nullptr), std::invalid_argument);
  };
  GemmArgs g = p.args;
  g.aux = p.args.d;  // a pre-activation without an activation
  g.ld_aux = p.args.ldd;
  refused(g, "needs an activation");
  g = p.args;
  g.d_type = ElemType::e4m3;
  refused(g, "d_scale");
  g = p.args;
  g.d_type = ElemType::e4m3;
  g.d_scale = p.scalars.get() + kDScaleAt;
  g.accumulate = true;
  refused(g, "high precision");
  g = p.args;
  g.ldd = p.args.b.rows - 2;
  refused(g, "leading dimension");
  g = p.args;
  g.a.type = ElemType::bf16;
  refused(g, "FP8 only");
  g = p.args;
  g.a.ld = g.a.k + 8;
  refused(g, "multiples of 16");
  g = p.args;
  g.b.scaling = Scaling::block_128x128;
  refused(g, "one operand per-tensor");
  g = p.args;
  g.a.scaling = Scaling::mx_1x32;
  g.b.scaling = Scaling::block_1x128;
  refused(g, "one operand MXFP8");
  g = p.args;
  g.a.scaling = g.b.scaling = Scaling::mx_1x32;
  g.a.scale_stride = (g.a.k + 31) / 32 - 1;
  refused(g, "shorter than ceil(K / 32)");
  g.a.scale_stride = 0;
  g.a.scale_order = BlockScaleOrder::k_block_major;
  refused(g, "two orders");
  g.b.scale_order = BlockScaleOrder::k_block_major;
  g.b.scale_stride = g.b.rows - 1;
  refused(g, "shorter than the operand's rows");
  g = p.args;
  g.a.k = g.b.k = 0;
  refused(g, "out of range");
}

std::string find_cuobjdump() {
  for (const char* dir : {"/usr/local/cuda/bin", "/usr/bin"}) {
    const auto path = std::filesystem::path(dir) / "cuobjdump";
    if (std::filesystem::exists(path)) return path.string();
  }
  return {};
}

// The machine code must be what the kernel is about: FP8 warpgroup MMAs
// (QGMMA) fed by TMA loads (UTMALDG), registers moved by setmaxnreg.
TEST(GeneratedGemmGpu, SassHoldsQgmmaAndTmaLoads) {
  REQUIRE_HOPPER();
  const std::string cuobjdump = find_cuobjdump();
  if (cuobjdump.empty()) GTEST_SKIP() << "no cuobjdump on this machine";
  for (int form : {0, 1, 2}) {
    const bool block = form > 0;  // 1: 1x128 x 128x128, 2: MXFP8
    Problem p = form == 2 ? make_mx_problem(kShapes[4], 1003)
                : form == 1
                    ? make_block_problem(Scaling::block_1x128, Scaling::block_128x128, kShapes[4],
                                         1001, 0, false)
                    : make_problem(per_tensor(ElemType::e4m3, ElemType::e5m2, ElemType::bf16, true),
                                   kShapes[4], 1002);
    const Fp8GemmKernel kernel = runner().choice(p.args).kernel;
    const CompiledKernel& compiled = runner().compiled(kernel);
    const auto dir = std::filesystem::temp_directory_path();
    const auto cubin = dir / (kernel.name() + ".cubin");
    const auto sass = dir / (kernel.name() + ".sass");
    std::ofstream(cubin, std::ios::binary).write(compiled.cubin.data(), compiled.cubin.size());
    const std::string command =
        cuobjdump + " -sass " + cubin.string() + " > " + sass.string() + " 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(sass);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(kernel.name());
    EXPECT_NE(text.find("QGMMA.64x" + std::to_string(kernel.block_n) + "x32.F32.E4M3." +
                        (block ? "E4M3" : "E5M2")),
              std::string::npos);
    EXPECT_NE(text.find("UTMALDG.2D"), std::string::npos);
    EXPECT_NE(text.find("USETMAXREG"), std::string::npos);
    std::filesystem::remove(cubin);
    std::filesystem::remove(sass);
  }
}

}  // namespace
}  // namespace fp8c::runtime
