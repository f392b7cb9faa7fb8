// The cuBLASLt GemmRunner on the GPU against a float64 reference of the
// operands as stored, for every form it supports: per-tensor FP8 (each type
// pairing, bf16/fp16/fp32/FP8 D, bias, GELU with aux, fast accumulation,
// d_scale and amax), high precision, accumulate, segmented K, two streams,
// block scaling. Outputs are poisoned (0xFF: NaN in every float type) before
// each run, so an element left unwritten fails. The tolerance is stated and
// justified in gemm_reference.hpp. Skipped, visibly, without a GPU.
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>

#include "gemm_problem.hpp"
#include "gemm_reference.hpp"
#include "runtime/gemm/cublaslt_library.hpp"
#include "runtime/gemm/cublaslt_requirements.hpp"
#include "runtime/gemm/gemm.hpp"

namespace fp8c::runtime {
namespace {

using namespace gemm_test;
using testing::decode;
using testing::GemmReference;
using testing::HostMatrix;

// Never destroyed, like the fixture's context: no teardown order to get
// wrong against cuBLASLt's own at exit.
GemmRunner& runner() {
  static GemmRunner* instance = [] {
    testing::gpu();  // makes the device's context current
    return make_cublaslt_runner().release();
  }();
  return *instance;
}

void run_and_check(Problem& p) {
  gemm_test::run_and_check(runner(), p);
}

const Shape kSmall{128, 256, 512};
const Shape kOdd{264, 768, 384, 32};  // not square, not powers of two, padded leading dims
const Shape kLarge{1000, 1024, 4096};

TEST(CublasLtGemmGpu, PerTensorFp8Forms) {
  REQUIRE_GPU();
  const ElemType e4 = ElemType::e4m3, e5 = ElemType::e5m2;
  const std::vector<Form> forms = {
      {"e4m3 x e4m3 -> bf16 + bias", e4, e4, ElemType::bf16, true},
      {"e4m3 x e4m3 -> fp16 + bias", e4, e4, ElemType::fp16, true, ElemType::fp16},
      {"e4m3 x e5m2 -> fp32 + bias", e4, e5, ElemType::fp32, true},
      {"e5m2 x e4m3 -> bf16, gelu aux + bias", e5, e4, ElemType::bf16, true, ElemType::bf16, true,
       true},
      {"e4m3 x e4m3 -> bf16, gelu aux, fast accumulation", e4, e4, ElemType::bf16, false,
       ElemType::bf16, true, true, ElemType::bf16, true},
      {"e4m3 x e4m3 -> bf16, gelu, no aux", e4, e4, ElemType::bf16, false, ElemType::bf16, true},
      {"e4m3 x e4m3 -> e4m3 + bias, amax", e4, e4, e4, true, ElemType::bf16, false, false,
       ElemType::bf16, false, true},
      {"e4m3 x e5m2 -> e5m2, amax", e4, e5, e5, false, ElemType::bf16, false, false, ElemType::bf16,
       false, true},
      {"e4m3 x e4m3 -> e4m3, gelu bf16 aux + bias, amax", e4, e4, e4, true, ElemType::bf16, true,
       true, ElemType::bf16, false, true},
  };
  std::uint32_t seed = 1;
  for (const Form& f : forms)
    for (const Shape& s : {kSmall, kOdd}) {
      Problem p = make_problem(f, s, seed++);
      run_and_check(p);
    }
}

// The forms the executor asks for. Scale pointers 4 bytes past a 16-byte
// boundary make cublasLtMatmul fail on the H200 (NOT_SUPPORTED, for every
// FP8 form), so the runner refuses them up front, naming the rule.
TEST(CublasLtGemmGpu, ExecutorFormsAndScaleAlignment) {
  REQUIRE_GPU();
  const ElemType e4 = ElemType::e4m3, e5 = ElemType::e5m2, bf = ElemType::bf16;
  const std::vector<Form> forms = {
      {"e4m3 x e4m3 -> bf16, gelu aux + bias", e4, e4, bf, true, bf, true, true},
      {"e4m3 x e4m3 -> bf16 + bias", e4, e4, bf, true},
      {"e5m2 x e4m3 -> bf16", e5, e4, bf},
      {"e5m2 x e4m3 -> fp32", e5, e4, ElemType::fp32},
  };
  std::uint32_t seed = 500;
  for (const Form& f : forms) {
    Problem p = make_problem(f, kSmall, seed++);
    run_and_check(p);
    DeviceBuffer moved(64);
    p.args.a.scale_inv = moved.get() + 4;
    std::string why;
    EXPECT_FALSE(runner().supports(p.args, &why)) << f.name;
    EXPECT_NE(why.find("scale_inv must be 16-byte aligned"), std::string::npos) << why;
  }
}

TEST(CublasLtGemmGpu, PerTensorFp8LargeShape) {
  REQUIRE_GPU();
  const ElemType e4 = ElemType::e4m3;
  for (const Form& f : {Form{"e4m3 x e4m3 -> bf16 + bias", e4, e4, ElemType::bf16, true},
                        Form{"e4m3 x e4m3 -> e4m3, gelu bf16 aux + bias, amax", e4, e4, e4, true,
                             ElemType::bf16, true, true, ElemType::bf16, false, true}}) {
    Problem p = make_problem(f, kLarge, 7);
    run_and_check(p);
  }
}

TEST(CublasLtGemmGpu, HighPrecisionForms) {
  REQUIRE_GPU();
  const ElemType bf = ElemType::bf16, h = ElemType::fp16, f32 = ElemType::fp32;
  const std::vector<Form> forms = {
      {"bf16 -> bf16 + bias", bf, bf, bf, true, bf},
      {"bf16 -> fp32 + bias", bf, bf, f32, true, f32},
      {"bf16 -> bf16, gelu aux + bias", bf, bf, bf, true, bf, true, true, bf},
      {"fp16 -> fp16, gelu aux + bias", h, h, h, true, h, true, true, h},
      {"fp32 -> fp32", f32, f32, f32},
  };
  std::uint32_t seed = 100;
  for (const Form& f : forms)
    for (const Shape& s : {kSmall, kOdd}) {
      Problem p = make_problem(f, s, seed++);
      run_and_check(p);
    }
  Problem p = make_problem(forms[0], kLarge, seed);
  run_and_check(p);
}

// High-precision operands stored K-outer ([k][rows], as a recipe-none
// layer's dgrad and wgrad read their row-major inputs): the same product.
TEST(CublasLtGemmGpu, KOuterHighPrecisionOperands) {
  REQUIRE_GPU();
  const ElemType bf = ElemType::bf16;
  const Form f{"bf16 k-outer -> bf16 + bias", bf, bf, bf, true, bf};
  for (const Shape& s : {kSmall, kOdd}) {
    for (int which = 0; which < 3; ++which) {  // a, b, both K-outer
      Problem p = make_problem(f, s, 300 + which);
      const auto transpose = [](const HostMatrix& m) {
        std::vector<unsigned char> t(static_cast<std::size_t>(m.rows * m.cols) * m.element_size());
        for (std::int64_t r = 0; r < m.rows; ++r)
          for (std::int64_t c = 0; c < m.cols; ++c)
            std::memcpy(&t[(c * m.rows + r) * m.element_size()],
                        &m.bytes[(r * m.ld + c) * m.element_size()], m.element_size());
        return t;
      };
      DeviceBuffer ta, tb;
      if (which != 1) {
        ta = upload(transpose(p.a));
        p.args.a.data = ta.get();
        p.args.a.k_outer = true;
        p.args.a.ld = s.m;
      }
      if (which != 0) {
        tb = upload(transpose(p.b));
        p.args.b.data = tb.get();
        p.args.b.k_outer = true;
        p.args.b.ld = s.n;
      }
      run_and_check(p);
    }
  }
}

// cuBLASLt's GELU against both textbook forms, on its own fp32 pre-activation
// (aux), so that GEMM error plays no part: the two forms differ by up to
// 4.8e-4, far above fp32 rounding. fp8c's kernels and CPU reference use the
// tanh form (runtime/cpu/activation.hpp); this says whether cuBLASLt agrees.
TEST(CublasLtGemmGpu, GeluIsTheTanhForm) {
  REQUIRE_GPU();
  const ElemType bf = ElemType::bf16, f32 = ElemType::fp32;
  const Shape s{256, 256, 512};
  std::mt19937 rng(5);
  Problem p;
  p.form = {"bf16 -> fp32, gelu fp32 aux", bf, bf, f32, false, f32, true, true, f32};
  p.shape = s;
  // Pre-activations of about N(0, 2^2): most of GELU's curved part.
  p.a = testing::random_matrix(bf, s.m, s.k, s.k, 0.3, rng);
  p.b = testing::random_matrix(bf, s.n, s.k, s.k, 0.3, rng);
  finish(p, rng);
  run_and_check(p);
  const auto d = download<float>(p.dd, static_cast<std::size_t>(s.m * s.n));
  const auto z = download<float>(p.daux, static_cast<std::size_t>(s.m * s.n));
  // Project cuBLASLt's deviation from the tanh form onto the erf form's:
  // about 0 for the tanh form (whatever noise a fast tanh adds does not
  // follow the erf-tanh difference), about 1 for the erf form.
  double along = 0, length = 0, tanh_max = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const double from_tanh = d[i] - testing::gelu_tanh(z[i]);
    const double erf_minus_tanh = testing::gelu_erf(z[i]) - testing::gelu_tanh(z[i]);
    along += from_tanh * erf_minus_tanh;
    length += erf_minus_tanh * erf_minus_tanh;
    tanh_max = std::max(tanh_max, std::fabs(from_tanh));
  }
  const double towards_erf = along / length;
  RecordProperty("gelu_towards_erf", std::to_string(towards_erf));
  RecordProperty("gelu_max_from_tanh", std::to_string(tanh_max));
  EXPECT_LT(towards_erf, 0.5) << "cuBLASLt's GELU is the erf form (" << towards_erf
                              << " of the way from tanh to erf), not fp8c's tanh form";
  // 2e-3: a hardware tanh (relative error 2^-11) times |z| / 2 for |z| up to 8.
  EXPECT_LT(tanh_max, 2e-3) << "cuBLASLt's GELU, against the tanh form on its own aux";
}

// D += A.B^T: a plain run then an accumulating one leaves twice the product.
TEST(CublasLtGemmGpu, AccumulateAddsIntoFp32D) {
  REQUIRE_GPU();
  for (const Form& f :
       {Form{"e4m3 x e5m2 -> fp32 + bias, accumulate", ElemType::e4m3, ElemType::e5m2,
             ElemType::fp32, true},
        Form{"bf16 -> fp32, accumulate", ElemType::bf16, ElemType::bf16, ElemType::fp32}}) {
    Problem p = make_problem(f, kOdd, 11);
    SCOPED_TRACE(f.name);
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

// Segmented K (a wgrad walking rank segments): two accumulating calls on
// sub-pointers along K equal one call over all of K.
TEST(CublasLtGemmGpu, SegmentedKEqualsOneCall) {
  REQUIRE_GPU();
  const Form f{"e4m3 x e5m2 -> fp32", ElemType::e4m3, ElemType::e5m2, ElemType::fp32};
  const Shape s{256, 512, 1024};
  Problem p = make_problem(f, s, 13);
  Stream stream;
  poison(p, stream.get());
  runner().run(p.args, stream.get());
  stream.synchronize();
  check(p);
  const auto whole = download<float>(p.dd, static_cast<std::size_t>(s.m * s.n));

  const std::int64_t split = 384;  // 16-byte aligned, not 256: a plan of its own
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

// fp8(D * d_scale) saturates at the format's largest value, and amax is of D
// before scaling.
TEST(CublasLtGemmGpu, Fp8OutputSaturatesAndReportsAmax) {
  REQUIRE_GPU();
  for (ElemType out : {ElemType::e4m3, ElemType::e5m2}) {
    const Form f{"e4m3 x e5m2 -> fp8 D, saturating, amax",
                 ElemType::e4m3,
                 ElemType::e5m2,
                 out,
                 false,
                 ElemType::bf16,
                 false,
                 false,
                 ElemType::bf16,
                 false,
                 true};
    Problem p = make_problem(f, kSmall, 17);
    p.d_scale *= 4;  // everything above 3/8 of the largest |D| overflows
    p.scalars.upload(&p.d_scale, 4, kDScaleAt);
    run_and_check(p);
  }
}

// Two streams at once, each with a workspace of its own (WorkspacePool).
TEST(CublasLtGemmGpu, TwoStreamsAtOnce) {
  REQUIRE_GPU();
  const Form f{"e4m3 x e4m3 -> bf16", ElemType::e4m3, ElemType::e4m3, ElemType::bf16};
  Problem p = make_problem(f, kLarge, 19), q = make_problem(f, kLarge, 23);
  Stream one, two;
  poison(p, one.get());
  poison(q, two.get());
  runner().run(p.args, one.get());
  runner().run(q.args, two.get());
  one.synchronize();
  two.synchronize();
  check(p);
  check(q);
}

TEST(CublasLtGemmGpu, BlockScaledForms) {
  REQUIRE_GPU();
  if (cublaslt().version < kCublasLtBlockScalingVersion)
    GTEST_SKIP() << "cuBLASLt " << cublaslt().version << " has no block scaling";
  const Scaling row = Scaling::block_1x128, tile = Scaling::block_128x128;
  std::uint32_t seed = 31;
  for (auto [a, b] : {std::pair{row, tile}, std::pair{row, row}, std::pair{tile, row}})
    for (const Shape& s : {Shape{256, 512, 1024}, Shape{512, 384, 2048}}) {
      Problem p = make_block_problem(a, b, s, seed++);
      run_and_check(p);
    }
}

// A 128x128 scale tensor whose rows of blocks (ceil(K / 128) of them) are not
// a multiple of 4 long, over more than one row of blocks: cuBLASLt reads it
// with each row padded to a multiple of 4 blocks (scale_stride). Measured on
// the H200 (cuBLASLt 13): the same shapes with packed rows fail this check.
TEST(CublasLtGemmGpu, BlockScaled128x128ScaleRowsArePaddedToFourBlocks) {
  REQUIRE_GPU();
  if (cublaslt().version < kCublasLtBlockScalingVersion)
    GTEST_SKIP() << "cuBLASLt " << cublaslt().version << " has no block scaling";
  const Scaling row = Scaling::block_1x128, tile = Scaling::block_128x128;
  std::uint32_t seed = 41;
  for (auto [a, b] : {std::pair{row, tile}, std::pair{tile, row}})
    for (const Shape& s : {Shape{256, 384, 640}, Shape{384, 256, 384}, Shape{512, 640, 1408}}) {
      const std::int64_t nb = (s.k + 127) / 128;
      Problem p = make_block_problem(a, b, s, seed++, (nb + 3) / 4 * 4);
      run_and_check(p);
    }
}

TEST(CublasLtGemmGpu, RefusedFormsSayWhyAndThrow) {
  REQUIRE_GPU();
  Problem p = make_problem({"e4m3 x e4m3 -> bf16", ElemType::e4m3, ElemType::e4m3}, kSmall, 37);
  std::string why;
  EXPECT_TRUE(runner().supports(p.args, &why)) << why;
  GemmArgs relu = p.args;
  relu.activation = Activation::relu;
  EXPECT_FALSE(runner().supports(relu, &why));
  EXPECT_NE(why.find("executor runs its own activation kernel"), std::string::npos) << why;
  EXPECT_THROW(runner().run(relu, nullptr), std::invalid_argument);
  GemmArgs row_major = p.args;
  row_major.a.scaling = Scaling::block_1x128;
  row_major.b.scaling = Scaling::block_128x128;
  EXPECT_FALSE(runner().supports(row_major, &why));
  EXPECT_FALSE(why.empty());
}

}  // namespace
}  // namespace fp8c::runtime
