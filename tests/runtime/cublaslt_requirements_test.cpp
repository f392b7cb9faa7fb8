// What the cuBLASLt runner accepts and refuses, decided without the library
// or a GPU: every refusal names the rule that was broken.
#include "runtime/gemm/cublaslt_requirements.hpp"

#include <gtest/gtest.h>

#include <string_view>

namespace fp8c::runtime {
namespace {

constexpr std::size_t kCublas13 = 130100;
constexpr std::size_t kCublas128 = 120800;
constexpr int kHopper = 90;

// Fake device addresses, 256-byte aligned and far apart.
constexpr CUdeviceptr kA = 0x100000, kB = 0x200000, kD = 0x300000, kBias = 0x400000,
                      kAux = 0x500000, kScaleA = 0x600000, kScaleB = 0x600100, kDScale = 0x600200,
                      kAmax = 0x600300;

GemmArgs fp8_gemm(std::int64_t m = 256, std::int64_t n = 512, std::int64_t k = 1024) {
  GemmArgs g;
  g.a = {kA, ElemType::e4m3, m, k, k, Scaling::per_tensor, kScaleA};
  g.b = {kB, ElemType::e4m3, n, k, k, Scaling::per_tensor, kScaleB};
  g.d = kD;
  g.d_type = ElemType::bf16;
  g.ldd = n;
  return g;
}

GemmArgs high_precision_gemm(ElemType type, std::int64_t m = 256, std::int64_t n = 512,
                             std::int64_t k = 1024) {
  GemmArgs g = fp8_gemm(m, n, k);
  g.a.type = g.b.type = g.d_type = type;
  g.a.scaling = g.b.scaling = Scaling::none;
  g.a.scale_inv = g.b.scale_inv = 0;
  return g;
}

// Block-scaled: activations 1x128 (K-block-major), weights 128x128.
GemmArgs block_gemm(std::int64_t m = 256, std::int64_t n = 512, std::int64_t k = 1024) {
  GemmArgs g = fp8_gemm(m, n, k);
  g.a.scaling = Scaling::block_1x128;
  g.a.scale_order = BlockScaleOrder::k_block_major;
  g.b.scaling = Scaling::block_128x128;
  return g;
}

::testing::AssertionResult accepted(const GemmArgs& g, std::size_t version = kCublas13,
                                    int sm = kHopper) {
  if (auto p = cublaslt_form_problem(g, version, sm))
    return ::testing::AssertionFailure() << "refused: " << *p;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult refused(const GemmArgs& g, std::string_view words,
                                   std::size_t version = kCublas13, int sm = kHopper) {
  const auto p = cublaslt_form_problem(g, version, sm);
  if (!p) return ::testing::AssertionFailure() << "accepted; expected a refusal about: " << words;
  if (p->find(words) == std::string::npos)
    return ::testing::AssertionFailure() << "refused for another reason: " << *p;
  return ::testing::AssertionSuccess() << *p;
}

TEST(CublasLtRequirements, PerTensorFp8OutputTypes) {
  GemmArgs g = fp8_gemm();
  for (ElemType d : {ElemType::bf16, ElemType::fp16, ElemType::fp32, ElemType::e4m3}) {
    g.d_type = d;
    EXPECT_TRUE(accepted(g)) << to_string(d);
  }
  g.d_type = ElemType::e5m2;
  EXPECT_TRUE(refused(g, "e5m2 D only when an operand is e5m2"));
  g.b.type = ElemType::e5m2;  // e4m3 x e5m2: dgrad and wgrad with e5m2 gradients
  EXPECT_TRUE(accepted(g));
  g.a.type = ElemType::e5m2;
  EXPECT_TRUE(refused(g, "no e5m2 x e5m2"));
}

TEST(CublasLtRequirements, Fp8NeedsAdaOrNewer) {
  EXPECT_TRUE(refused(fp8_gemm(), "sm_89 or newer; this GPU is sm_80", kCublas13, 80));
  EXPECT_TRUE(accepted(fp8_gemm(), kCublas13, 89));
  EXPECT_TRUE(accepted(high_precision_gemm(ElemType::bf16), kCublas13, 80));
}

TEST(CublasLtRequirements, OperandsAreBothFp8OrBothOneHighPrecisionType) {
  GemmArgs g = fp8_gemm();
  g.b.type = ElemType::bf16;
  g.b.scaling = Scaling::none;
  EXPECT_TRUE(refused(g, "not one of each"));
  g = high_precision_gemm(ElemType::bf16);
  g.b.type = ElemType::fp16;
  EXPECT_TRUE(refused(g, "must have one type"));
  g = high_precision_gemm(ElemType::bf16);
  g.a.scaling = Scaling::per_tensor;
  EXPECT_TRUE(refused(g, "high-precision operands are unscaled"));
  g = fp8_gemm();
  g.a.scale_inv = 0;
  EXPECT_TRUE(refused(g, "per_tensor but has no scale_inv"));
  g.a.scaling = Scaling::none;  // unscaled FP8: scale 1
  EXPECT_TRUE(accepted(g));
}

TEST(CublasLtRequirements, HighPrecisionOutputTypes) {
  for (ElemType t : {ElemType::bf16, ElemType::fp16, ElemType::fp32}) {
    GemmArgs g = high_precision_gemm(t);
    EXPECT_TRUE(accepted(g)) << to_string(t);
    g.d_type = ElemType::fp32;
    EXPECT_TRUE(accepted(g)) << to_string(t);
  }
  GemmArgs g = high_precision_gemm(ElemType::bf16);
  g.d_type = ElemType::fp16;
  EXPECT_TRUE(refused(g, "a bf16 GEMM writes a bf16 or fp32 D"));
  g.d_type = ElemType::e4m3;
  EXPECT_TRUE(refused(g, "a bf16 GEMM writes a bf16 or fp32 D"));
}

TEST(CublasLtRequirements, ShapesAndLeadingDimensions) {
  GemmArgs g = fp8_gemm();
  g.b.k = 512;
  EXPECT_TRUE(refused(g, "A has K = 1024 but B has K = 512"));
  g = fp8_gemm();
  g.a.rows = 0;
  EXPECT_TRUE(refused(g, "must be positive"));
  g = fp8_gemm();
  g.a.ld = 512;
  EXPECT_TRUE(refused(g, "ld is smaller than K"));
  g = fp8_gemm();
  g.ldd = 500;
  EXPECT_TRUE(refused(g, "smaller than N"));
  g = fp8_gemm();
  g.d = 0;
  EXPECT_TRUE(refused(g, "need device pointers"));
  g = fp8_gemm(1000, 1024, 4096);  // M need not be a multiple of 16
  EXPECT_TRUE(accepted(g));
}

TEST(CublasLtRequirements, Fp8AlignmentRulesNameTheRule) {
  GemmArgs g = fp8_gemm();
  g.a.data += 8;
  EXPECT_TRUE(refused(g, "A and B must be 16-byte aligned"));
  g = fp8_gemm(256, 512, 1000);
  EXPECT_TRUE(refused(g, "lda and ldb must be multiples of 16"));
  g.a.ld = g.b.ld = 1008;
  EXPECT_TRUE(refused(g, "K must be a multiple of 16"));
  g = fp8_gemm();
  g.ldd = 516;  // 1032 bytes of bf16
  EXPECT_TRUE(refused(g, "ldd * sizeof(D) must be a multiple of 16 bytes"));
  g.ldd = 520;
  EXPECT_TRUE(accepted(g));
  g.d += 2;
  EXPECT_TRUE(refused(g, "D must be 16-byte aligned"));
  g = fp8_gemm();
  g.bias = kBias + 8;
  EXPECT_TRUE(refused(g, "bias must be 16-byte aligned"));
  g = fp8_gemm();
  g.a.scale_inv += 2;
  EXPECT_TRUE(refused(g, "scale_inv must be 16-byte aligned"));
  g = fp8_gemm();
  g.b.scale_inv += 4;  // what cublasLtMatmul refused on the H200
  EXPECT_TRUE(refused(g, "B's scale_inv must be 16-byte aligned"));
  g = fp8_gemm();
  g.d_type = ElemType::e4m3;
  g.d_scale = kDScale + 4;
  EXPECT_TRUE(refused(g, "d_scale and d_amax must be 16-byte aligned"));
  // Segmented K: a sub-pointer 16 elements along K is still 16-byte aligned.
  g = fp8_gemm();
  g.a.data += 16;
  g.b.data += 16;
  g.a.k = g.b.k = 512;
  EXPECT_TRUE(accepted(g));
  // High precision has no such rules beyond element alignment.
  g = high_precision_gemm(ElemType::bf16, 100, 200, 300);
  g.a.ld = g.a.k = g.b.ld = g.b.k = 300;
  g.ldd = 200;
  g.a.data += 2;
  EXPECT_TRUE(accepted(g));
  g.a.data += 1;
  EXPECT_TRUE(refused(g, "A's pointer is not element-aligned"));
}

TEST(CublasLtRequirements, FP8OutputScaleAndAmax) {
  GemmArgs g = fp8_gemm();
  g.d_type = ElemType::e4m3;
  g.d_scale = kDScale;
  g.d_amax = kAmax;
  EXPECT_TRUE(accepted(g));
  g.d_type = ElemType::bf16;
  EXPECT_TRUE(refused(g, "d_scale applies to an FP8 D only"));
  g.d_scale = 0;
  EXPECT_TRUE(refused(g, "d_amax is produced only with an FP8 D"));
}

TEST(CublasLtRequirements, AccumulateOnlyIntoFp32WithoutActivation) {
  GemmArgs g = fp8_gemm();
  g.accumulate = true;
  EXPECT_TRUE(refused(g, "needs an fp32 D; D is bf16"));
  g.d_type = ElemType::fp32;
  EXPECT_TRUE(accepted(g));
  g.bias = kBias;
  EXPECT_TRUE(accepted(g));
  g = high_precision_gemm(ElemType::bf16);
  g.d_type = ElemType::fp32;
  g.accumulate = true;
  EXPECT_TRUE(accepted(g));
  g.activation = Activation::gelu;
  EXPECT_TRUE(refused(g, "accumulate with an activation"));
}

TEST(CublasLtRequirements, BiasTypes) {
  GemmArgs g = fp8_gemm();
  g.bias = kBias;
  g.bias_type = ElemType::bf16;
  EXPECT_TRUE(accepted(g));
  g.bias_type = ElemType::fp16;
  EXPECT_TRUE(refused(g, "a fp16 bias does not go with e4m3 operands and a bf16 D"));
  g.d_type = ElemType::fp16;
  EXPECT_TRUE(accepted(g));
  g.d_type = ElemType::fp32;
  g.bias_type = ElemType::bf16;
  EXPECT_TRUE(accepted(g));
  g.d_type = ElemType::e4m3;
  for (ElemType t : {ElemType::bf16, ElemType::fp16}) {
    g.bias_type = t;
    EXPECT_TRUE(accepted(g)) << to_string(t);
  }
  g = high_precision_gemm(ElemType::bf16);
  g.bias = kBias;
  g.bias_type = ElemType::bf16;
  EXPECT_TRUE(accepted(g));
  g.d_type = ElemType::fp32;
  EXPECT_TRUE(refused(g, "a bf16 bias does not go with bf16 operands and a fp32 D"));
  g.bias_type = ElemType::fp32;
  EXPECT_TRUE(accepted(g));
}

TEST(CublasLtRequirements, ReluAndSiluAreLeftToTheExecutor) {
  GemmArgs g = fp8_gemm();
  g.activation = Activation::relu;
  EXPECT_TRUE(refused(g, "executor runs its own activation kernel"));
  EXPECT_TRUE(refused(g, "bit mask"));
  g.activation = Activation::silu;
  EXPECT_TRUE(refused(g, "no SiLU epilogue"));
}

TEST(CublasLtRequirements, GeluWithAndWithoutAux) {
  GemmArgs g = fp8_gemm();
  g.activation = Activation::gelu;
  EXPECT_TRUE(accepted(g));  // GELU, nothing saved
  g.bias = kBias;
  g.aux = kAux;
  g.ld_aux = g.b.rows;
  g.aux_type = ElemType::bf16;
  EXPECT_TRUE(accepted(g));  // GELU_AUX_BIAS
  g.ld_aux = 516;
  EXPECT_TRUE(refused(g, "multiple of 8 and at least N"));
  g.ld_aux = 512;
  g.aux_type = ElemType::fp16;
  EXPECT_TRUE(refused(g, "aux must have D's type (bf16)"));
  // An e4m3 D keeps a bias-typed aux (cuBLASLt's C type).
  g.d_type = ElemType::e4m3;
  g.aux_type = ElemType::bf16;
  EXPECT_TRUE(accepted(g));
  g.aux_type = ElemType::fp16;
  EXPECT_TRUE(refused(g, "must be bf16 (the bias type)"));
  g.b.type = ElemType::e5m2;
  EXPECT_TRUE(refused(g, "only for e4m3 x e4m3 -> e4m3"));
  g = fp8_gemm();
  g.activation = Activation::gelu;
  g.d_type = ElemType::fp32;
  EXPECT_TRUE(refused(g, "bf16, fp16 or e4m3 D"));
  g = fp8_gemm();
  g.aux = kAux;
  g.ld_aux = 512;
  EXPECT_TRUE(refused(g, "aux is written only with an activation"));
  g = high_precision_gemm(ElemType::bf16);
  g.d_type = g.aux_type = ElemType::fp32;
  g.activation = Activation::gelu;
  g.aux = kAux;
  g.ld_aux = 512;
  EXPECT_TRUE(accepted(g));
}

TEST(CublasLtRequirements, FastAccumulateIsForPerTensorFp8) {
  GemmArgs g = fp8_gemm();
  g.fast_accumulate = true;
  EXPECT_TRUE(accepted(g));
  g = high_precision_gemm(ElemType::bf16);
  g.fast_accumulate = true;
  EXPECT_TRUE(refused(g, "FP8 operands only"));
  g = block_gemm();
  g.fast_accumulate = true;
  EXPECT_TRUE(refused(g, "block scaling does not take fast_accumulate"));
}

TEST(CublasLtRequirements, BlockScalingNeedsCublas129AndHopper) {
  const GemmArgs g = block_gemm();
  EXPECT_TRUE(accepted(g));
  EXPECT_TRUE(accepted(g, 120900));
  EXPECT_TRUE(refused(g, "needs cuBLASLt 12.9 or newer", kCublas128));
  EXPECT_TRUE(refused(g, "Hopper (sm_90) feature; this GPU is sm_100", kCublas13, 100));
  EXPECT_TRUE(refused(g, "Hopper (sm_90) feature; this GPU is sm_89", kCublas13, 89));
}

TEST(CublasLtRequirements, BlockScalingPairs) {
  GemmArgs g = block_gemm();
  g.a.scaling = Scaling::block_128x128;  // dgrad/wgrad never pair two weights
  EXPECT_TRUE(refused(g, "no 128x128 x 128x128"));
  g = block_gemm();
  g.b.scaling = Scaling::block_1x128;  // wgrad: 1x128 x 1x128
  g.b.scale_order = BlockScaleOrder::k_block_major;
  EXPECT_TRUE(accepted(g));
  g.b.scaling = Scaling::per_tensor;
  EXPECT_TRUE(refused(g, "needs both operands block-scaled"));
  g = block_gemm();
  g.b.scale_inv = 0;
  EXPECT_TRUE(refused(g, "block-scaled but has no scale_inv"));
}

TEST(CublasLtRequirements, BlockScalingLayoutsAreChecked) {
  // fp8c's quantizer writes 1x128 scales row-major: the transpose of what
  // cuBLASLt reads, unless there is one block per row.
  GemmArgs g = block_gemm();
  g.a.scale_order = BlockScaleOrder::row_major;
  EXPECT_TRUE(refused(g, "reads scales K-block-major"));
  EXPECT_TRUE(refused(g, "set scale_order = k_block_major"));
  g = block_gemm(256, 128, 128);  // one 1x128 block per row, one 128x128 block
  g.a.scale_order = BlockScaleOrder::row_major;
  EXPECT_TRUE(accepted(g));
  // K-block-major with rows % 4 != 0: padding unknown.
  g = block_gemm(250, 512, 1024);
  EXPECT_TRUE(refused(g, "rows % 4 == 0"));
  // 128x128: cuBLASLt reads each row of blocks padded to a multiple of 4;
  // packed [ceil(N/128)][ceil(K/128)] is the same only when ceil(K/128) % 4
  // == 0 or there is one row of blocks.
  g = block_gemm(256, 512, 640);  // 5 blocks per row, 4 rows of blocks
  g.a.ld = g.b.ld = 640;
  EXPECT_TRUE(refused(g, "lay it out with scale_stride = 8"));
  g.b.scale_stride = 6;
  EXPECT_TRUE(refused(g, "padded to a multiple of 4"));
  g.b.scale_stride = 4;
  EXPECT_TRUE(refused(g, "is less than the 5 K blocks"));
  g.b.scale_stride = 8;
  EXPECT_TRUE(accepted(g));
  g = block_gemm(256, 128, 640);
  g.a.ld = g.b.ld = 640;
  g.ldd = 128;
  EXPECT_TRUE(accepted(g));
}

TEST(CublasLtRequirements, BlockScalingEpiloguesAndOutputs) {
  GemmArgs g = block_gemm();
  g.bias = kBias;
  EXPECT_TRUE(accepted(g));
  g.d_type = ElemType::fp32;
  g.accumulate = true;
  EXPECT_TRUE(accepted(g));
  g = block_gemm();
  g.activation = Activation::gelu;
  EXPECT_TRUE(refused(g, "no activation epilogue"));
  g = block_gemm();
  g.d_type = ElemType::e4m3;
  EXPECT_TRUE(refused(g, "bf16, fp16 or fp32 D"));
}

TEST(CublasLtRequirements, MxFp8IsRefusedWithTheReason) {
  GemmArgs g = fp8_gemm();
  g.a.scaling = g.b.scaling = Scaling::mx_1x32;
  EXPECT_TRUE(refused(g, "only on Blackwell (sm_100+); this GPU is sm_90"));
  EXPECT_TRUE(refused(g, "swizzled 128x4-tile layout", kCublas13, 100));
}

TEST(CublasLtRequirements, KOuterIsForHighPrecisionOperandsOnly) {
  GemmArgs hp = high_precision_gemm(ElemType::bf16);
  hp.a.k_outer = true;
  hp.a.ld = hp.a.rows;
  EXPECT_TRUE(accepted(hp));
  hp.a.ld = hp.a.rows - 1;
  EXPECT_TRUE(refused(hp, "K-outer operand's ld is smaller than its rows"));
  GemmArgs f = fp8_gemm();
  f.b.k_outer = true;
  f.b.ld = f.b.rows;
  EXPECT_TRUE(refused(f, "must keep K innermost"));
}

}  // namespace
}  // namespace fp8c::runtime
