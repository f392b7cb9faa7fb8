// What the generated GEMM's runner accepts and refuses for the backward's
// epilogue (dact, dbias, the transposed FP8 D), decided without a GPU
// (generated_gemm_problem, as supports() asks it), and the configuration
// the call picks; cuBLASLt's runner refuses the same arguments by name.
#include <gtest/gtest.h>

#include <string>

#include "runtime/gemm/cublaslt_requirements.hpp"
#include "runtime/gemm/generated_gemm.hpp"

namespace fp8c::runtime {
namespace {

constexpr int kSms = 132;

// Fake device addresses, 256-byte aligned and 16 MiB apart (more than any
// buffer here takes: the runner refuses a saved pre-activation that overlaps
// what the call writes).
constexpr CUdeviceptr kA = 0x1000000, kB = 0x2000000, kD = 0x3000000, kPre = 0x4000000,
                      kDbias = 0x5000000, kWork = 0x6000000, kDt = 0x7000000, kScales = 0x8000000;

// A dgrad as the layer below wants it: e5m2 dy x e4m3 W, act' of GELU from
// the saved bf16 pre-activation, dbias, e5m2 D with its amax and D^T.
GemmArgs backward_gemm(std::int64_t m = 1000, std::int64_t n = 1056, std::int64_t k = 4096) {
  GemmArgs g;
  g.a = {kA, ElemType::e5m2, m, k, k, Scaling::per_tensor, kScales};
  g.b = {kB, ElemType::e4m3, n, k, k, Scaling::per_tensor, kScales + 16};
  g.d = kD;
  g.d_type = ElemType::e5m2;
  g.ldd = n;
  g.d_scale = kScales + 32;
  g.d_amax = kScales + 48;
  g.dact = Activation::gelu;
  g.aux = kPre;
  g.aux_type = ElemType::bf16;
  g.ld_aux = n;
  g.dbias = kDbias;
  g.dbias_type = ElemType::fp32;
  g.dbias_workspace = kWork;
  g.d_t = kDt;
  g.ld_dt = m;
  return g;
}

::testing::AssertionResult refused(const GemmArgs& g, const std::string& words) {
  const std::string why = generated_gemm_problem(g, false, kSms);
  if (why.empty()) return ::testing::AssertionFailure() << "accepted; expected: " << words;
  if (why.find(words) == std::string::npos)
    return ::testing::AssertionFailure() << "refused for another reason: " << why;
  return ::testing::AssertionSuccess() << why;
}

TEST(GeneratedGemmArgs, BackwardEpilogueIsTakenAndPicksItsForm) {
  const GemmArgs g = backward_gemm();
  EXPECT_EQ(generated_gemm_problem(g, false, kSms), "");
  const Fp8GemmKernel k = generated_gemm_choice(g, false, kSms).kernel;
  EXPECT_EQ(k.dact, Activation::gelu);
  EXPECT_TRUE(k.aux && k.dbias && k.transposed && k.amax);
  EXPECT_EQ(k.d, ElemType::e5m2);
  // Its own cubin: the name says every part.
  EXPECT_NE(k.name().find("_pre_bf16_dgelu_dbias_dt"), std::string::npos) << k.name();
  // Each part alone is a form of its own too.
  GemmArgs only_dbias = g;
  only_dbias.dact = Activation::none;
  only_dbias.aux = 0;
  only_dbias.d_t = 0;
  only_dbias.d_type = ElemType::bf16;
  EXPECT_EQ(generated_gemm_problem(only_dbias, false, kSms), "");
  const Fp8GemmKernel d = generated_gemm_choice(only_dbias, false, kSms).kernel;
  EXPECT_TRUE(d.dbias && !d.transposed && d.dact == Activation::none && !d.aux);
  // Block-scaled and MXFP8 operands take it as well.
  GemmArgs block = g;
  block.a.scaling = block.b.scaling = Scaling::block_1x128;
  EXPECT_EQ(generated_gemm_problem(block, false, kSms), "");
  GemmArgs mx = g;
  mx.a.scaling = mx.b.scaling = Scaling::mx_1x32;
  EXPECT_EQ(generated_gemm_problem(mx, false, kSms), "");
}

TEST(GeneratedGemmArgs, BackwardEpilogueRefusalsNameTheRule) {
  GemmArgs g = backward_gemm();
  g.aux = 0;
  EXPECT_TRUE(refused(g, "saved pre-activation"));
  g = backward_gemm();
  g.bias = kScales + 64;  // a forward bias beside act'
  EXPECT_TRUE(refused(g, "no activation, bias or accumulation beside it"));
  g = backward_gemm();
  g.activation = Activation::relu;
  EXPECT_TRUE(refused(g, "no activation, bias or accumulation beside it"));
  g = backward_gemm();
  g.dbias_workspace = 0;
  EXPECT_TRUE(refused(g, "dbias_workspace"));
  g = backward_gemm();
  g.dbias_workspace = kWork + 2;
  EXPECT_TRUE(refused(g, "dbias_workspace"));
  g = backward_gemm();
  g.dbias_type = ElemType::e4m3;
  EXPECT_TRUE(refused(g, "dbias must be bf16, fp16 or fp32"));
  g = backward_gemm();
  g.dbias_type = ElemType::bf16;
  g.dbias = kDbias + 1;
  EXPECT_TRUE(refused(g, "dbias is misaligned"));
  g = backward_gemm();
  g.d_type = ElemType::bf16;
  g.d_scale = 0;
  EXPECT_TRUE(refused(g, "transposed copy of D is FP8 only"));
  g = backward_gemm();
  g.ld_dt = g.a.rows - 1;
  EXPECT_TRUE(refused(g, "at least M"));
  g = backward_gemm();
  g.aux_type = ElemType::e4m3;  // the saved pre-activation is high precision
  EXPECT_TRUE(refused(g, "aux must be bf16, fp16 or fp32"));
}

// The saved pre-activation is read through the read-only path: dz written
// over it (or over D^T or the dbias partials) is refused, and so is a
// partial overlap; memory right after it is not.
TEST(GeneratedGemmArgs, DactRefusesAnAuxThatTheCallWrites) {
  GemmArgs g = backward_gemm();
  g.d_type = ElemType::bf16;  // dz in place over a bf16 z: same type, same ld
  g.d_t = 0;
  g.d_scale = 0;
  g.d = g.aux;
  EXPECT_TRUE(refused(g, "must not overlap D"));
  g.d = g.aux + 2 * static_cast<CUdeviceptr>(g.ld_aux);  // one row down
  EXPECT_TRUE(refused(g, "must not overlap D"));
  const CUdeviceptr aux_end =
      g.aux + 2 * static_cast<CUdeviceptr>((g.a.rows - 1) * g.ld_aux + g.b.rows);
  g.d = aux_end;  // right after the last element
  EXPECT_EQ(generated_gemm_problem(g, false, kSms), "");
  g = backward_gemm();
  g.d_t = g.aux + 64;
  EXPECT_TRUE(refused(g, "must not overlap D^T"));
  g = backward_gemm();
  g.dbias_workspace = g.aux + 256;
  EXPECT_TRUE(refused(g, "must not overlap the dbias workspace"));
  // Without dact, aux is written (the forward's pre-activation), not read:
  // the rule does not apply.
  g = backward_gemm();
  g.dact = Activation::none;
  g.d_t = 0;
  g.d_type = ElemType::bf16;
  g.d_scale = 0;
  g.dbias = 0;
  g.activation = Activation::gelu;
  g.d = g.aux + 0x100000;
  EXPECT_EQ(generated_gemm_problem(g, false, kSms), "");
}

TEST(GeneratedGemmArgs, CublasLtRefusesTheBackwardEpilogue) {
  GemmArgs g = backward_gemm();
  const auto refused_by_cublaslt = [](const GemmArgs& args) {
    const auto why = cublaslt_form_problem(args, 130100, 90);
    return why && why->find("generated GEMM only") != std::string::npos;
  };
  EXPECT_TRUE(refused_by_cublaslt(g));
  // Each part alone, on a form cuBLASLt otherwise runs.
  GemmArgs plain = g;
  plain.dact = Activation::none;
  plain.aux = 0;
  plain.dbias = 0;
  plain.d_t = 0;
  plain.d_type = ElemType::bf16;
  plain.d_scale = plain.d_amax = 0;
  EXPECT_FALSE(cublaslt_form_problem(plain, 130100, 90).has_value());
  GemmArgs with = plain;
  with.dbias = kDbias;
  with.dbias_workspace = kWork;
  EXPECT_TRUE(refused_by_cublaslt(with));
  with = plain;
  with.d_type = ElemType::e5m2;
  with.d_scale = kScales + 32;
  with.d_t = kDt;
  with.ld_dt = plain.a.rows;
  EXPECT_TRUE(refused_by_cublaslt(with));
}

}  // namespace
}  // namespace fp8c::runtime
