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

#include "gemm_reference.hpp"
#include "runtime/gemm/cublaslt_library.hpp"
#include "runtime/gemm/cublaslt_requirements.hpp"
#include "runtime/gemm/gemm.hpp"

namespace fp8c::runtime {
namespace {

using testing::decode;
using testing::GemmReference;
using testing::HostMatrix;

constexpr unsigned char kPoison = 0xFF;

// Never destroyed, like the fixture's context: no teardown order to get
// wrong against cuBLASLt's own at exit.
GemmRunner& runner() {
  static GemmRunner* instance = [] {
    testing::gpu();  // makes the device's context current
    return make_cublaslt_runner().release();
  }();
  return *instance;
}

DeviceBuffer upload(const std::vector<unsigned char>& bytes) {
  DeviceBuffer buffer(bytes.size());
  buffer.upload(bytes.data(), bytes.size());
  return buffer;
}

template <typename T>
std::vector<T> download(const DeviceBuffer& buffer, std::size_t count) {
  std::vector<T> host(count);
  buffer.download(host.data(), count * sizeof(T));
  return host;
}

// One GEMM form as a test asks for it.
struct Form {
  std::string name;
  ElemType a = ElemType::e4m3, b = ElemType::e4m3, d = ElemType::bf16;
  bool bias = false;
  ElemType bias_type = ElemType::bf16;
  bool gelu = false, aux = false;
  ElemType aux_type = ElemType::bf16;
  bool fast_accumulate = false;
  bool amax = false;
};

struct Shape {
  std::int64_t m, n, k;
  std::int64_t pad = 0;  // extra elements in every leading dimension
};

std::string describe(const Form& f, const Shape& s) {
  std::ostringstream out;
  out << f.name << " " << s.m << "x" << s.n << "x" << s.k << (s.pad ? " padded" : "");
  return out.str();
}

// Host data, device buffers and arguments of one GEMM.
struct Problem {
  Form form;
  Shape shape;
  HostMatrix a, b;
  std::vector<double> bias;
  float d_scale = 1.0f;
  GemmReference ref;
  DeviceBuffer da, db, dd, dbias, daux, scalars, a_scales, b_scales;
  GemmArgs args;

  std::size_t d_bytes() const {
    return static_cast<std::size_t>(shape.m * args.ldd) * element_bytes(form.d);
  }
  std::size_t aux_bytes() const {
    return static_cast<std::size_t>(shape.m * args.ld_aux) * element_bytes(form.aux_type);
  }
};

// Scalars live in one buffer, 16 bytes apart.
constexpr std::size_t kAScaleAt = 0, kBScaleAt = 16, kDScaleAt = 32, kAmaxAt = 48;

// Per-tensor scales that are not powers of two, so a scale applied twice,
// or to the wrong operand, shows.
constexpr float kAScaleInv = 0.0371f, kBScaleInv = 0.0123f;

void finish(Problem& p, std::mt19937& rng) {
  const Form& f = p.form;
  const Shape& s = p.shape;
  if (f.bias) {
    std::vector<unsigned char> bytes(static_cast<std::size_t>(s.n) * element_bytes(f.bias_type));
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::int64_t j = 0; j < s.n; ++j) {
      unsigned char* at = &bytes[j * element_bytes(f.bias_type)];
      testing::encode(f.bias_type, static_cast<float>(normal(rng)), at);
      p.bias.push_back(decode(f.bias_type, at));
    }
    p.dbias = upload(bytes);
  }
  p.ref = testing::reference_gemm(p.a, p.b, f.bias ? &p.bias : nullptr);
  if (is_fp8(f.d)) {
    // Most of FP8's range, without overflow (the saturation test overflows on purpose).
    double max_want = 0;
    for (double z : p.ref.pre)
      max_want = std::max(max_want, std::fabs(f.gelu ? testing::gelu_tanh(z) : z));
    const double target = f.d == ElemType::e4m3 ? 300.0 : 30000.0;
    p.d_scale = static_cast<float>(target / max_want);
  }
  p.da = upload(p.a.bytes);
  p.db = upload(p.b.bytes);
  p.scalars = DeviceBuffer(64);
  const float scalars[16] = {kAScaleInv, 0, 0, 0, kBScaleInv, 0, 0, 0, p.d_scale};
  p.scalars.upload(scalars, sizeof scalars);

  GemmArgs& g = p.args;
  const bool fp8 = is_fp8(f.a);
  g.a = {p.da.get(),
         f.a,
         s.m,
         s.k,
         p.a.ld,
         fp8 ? Scaling::per_tensor : Scaling::none,
         fp8 ? p.scalars.get() + kAScaleAt : 0};
  g.b = {p.db.get(),
         f.b,
         s.n,
         s.k,
         p.b.ld,
         fp8 ? Scaling::per_tensor : Scaling::none,
         fp8 ? p.scalars.get() + kBScaleAt : 0};
  g.d_type = f.d;
  g.ldd = s.n + s.pad;
  g.bias = f.bias ? p.dbias.get() : 0;
  g.bias_type = f.bias_type;
  g.activation = f.gelu ? Activation::gelu : Activation::none;
  g.fast_accumulate = f.fast_accumulate;
  if (is_fp8(f.d)) g.d_scale = p.scalars.get() + kDScaleAt;
  if (f.amax) g.d_amax = p.scalars.get() + kAmaxAt;
  p.dd = DeviceBuffer(p.d_bytes());
  g.d = p.dd.get();
  if (f.aux) {
    g.ld_aux = g.ldd;
    g.aux_type = f.aux_type;
    p.daux = DeviceBuffer(p.aux_bytes());
    g.aux = p.daux.get();
  }
}

// Per-tensor (FP8) or unscaled (high-precision) operands.
Problem make_problem(const Form& f, const Shape& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p;
  p.form = f;
  p.shape = s;
  const double sigma_a = is_fp8(f.a) ? 8.0 : 1.0, sigma_b = is_fp8(f.b) ? 8.0 : 1.0;
  p.a = testing::random_matrix(f.a, s.m, s.k, s.k + s.pad, sigma_a, rng);
  p.b = testing::random_matrix(f.b, s.n, s.k, s.k + s.pad, sigma_b, rng);
  if (is_fp8(f.a)) {
    p.a.decode_all(kAScaleInv);
    p.b.decode_all(kBScaleInv);
  }
  finish(p, rng);
  return p;
}

// What the outputs must hold: `times` x the reference (accumulate runs twice).
void check(Problem& p, double times = 1.0) {
  const Form& f = p.form;
  const GemmArgs& g = p.args;
  const auto d = download<unsigned char>(p.dd, p.d_bytes());
  const auto aux =
      f.aux ? download<unsigned char>(p.daux, p.aux_bytes()) : std::vector<unsigned char>{};
  const float amax = download<float>(p.scalars, 16)[kAmaxAt / 4];
  const double fp8_max = is_fp8(f.d) ? numerics::fp8_max(f.d) : 0.0;
  std::size_t bad = 0, bad_aux = 0;
  std::ostringstream first;
  double want_amax = 0, amax_tol = 0, worst = 0;
  for (std::int64_t i = 0; i < p.shape.m; ++i)
    for (std::int64_t j = 0; j < p.shape.n; ++j) {
      const std::size_t r = static_cast<std::size_t>(i * p.shape.n + j);
      const double z = times * p.ref.pre[r];
      const double acc = times * testing::kAccumulationEps * p.ref.abs_sum[r];
      double want = z, tol = acc;
      if (f.gelu) {
        want = testing::gelu_tanh(z);
        tol = testing::kGeluSlope * acc + 5e-4 * (1.0 + std::fabs(z));
      }
      want_amax = std::max(want_amax, std::fabs(want));
      amax_tol = std::max(amax_tol, tol);
      const double got = decode(f.d, &d[(i * g.ldd + j) * element_bytes(f.d)]);
      double expect = want, limit = tol;
      if (is_fp8(f.d)) {
        expect = std::clamp(want * p.d_scale, -fp8_max, fp8_max);
        limit = p.d_scale * tol;
      }
      limit += testing::output_rounding(f.d) * std::fabs(expect) + testing::output_floor(f.d);
      const double err = std::fabs(got - expect);
      worst = std::max(worst, err / limit);
      if (!(err <= limit) && bad++ < 5)
        first << "\n  D[" << i << "][" << j << "] = " << got << ", want " << expect << " +- "
              << limit;
      if (f.aux) {
        const double a = decode(f.aux_type, &aux[(i * g.ld_aux + j) * element_bytes(f.aux_type)]);
        const double aux_limit = acc + testing::output_rounding(f.aux_type) * std::fabs(z) +
                                 testing::output_floor(f.aux_type);
        if (!(std::fabs(a - z) <= aux_limit) && bad_aux++ < 5)
          first << "\n  aux[" << i << "][" << j << "] = " << a << ", want " << z << " +- "
                << aux_limit;
      }
    }
  EXPECT_EQ(bad, 0u) << "of " << p.shape.m * p.shape.n << " elements" << first.str();
  EXPECT_EQ(bad_aux, 0u) << first.str();
  if (f.amax) {
    EXPECT_NEAR(amax, want_amax, amax_tol) << "amax of D before d_scale";
  }
  // The margin, for whoever tunes the tolerance: 1.0 would be at the limit.
  ::testing::Test::RecordProperty("worst_error_over_limit", std::to_string(worst));
}

void poison(Problem& p, CUstream stream) {
  p.dd.fill(kPoison, stream);
  if (p.form.aux) p.daux.fill(kPoison, stream);
  // The amax slot only: the scales beside it are inputs.
  FP8C_CU(driver().cuMemsetD8Async(p.scalars.get() + kAmaxAt, kPoison, 4, stream));
}

void run_and_check(Problem& p) {
  SCOPED_TRACE(describe(p.form, p.shape));
  std::string why;
  ASSERT_TRUE(runner().supports(p.args, &why)) << why;
  Stream stream;
  poison(p, stream.get());
  runner().run(p.args, stream.get());
  stream.synchronize();
  check(p);
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

// 1x128 and 128x128 block scaling: scales uploaded in the layout cuBLASLt
// reads (cublaslt_requirements.hpp), each element's value scaled by its block.
// `tile_stride`: floats from one row of 128x128 blocks to the next (0: packed,
// ceil(K / 128)).
Problem make_block_problem(Scaling a_scaling, Scaling b_scaling, const Shape& s, std::uint32_t seed,
                           std::int64_t tile_stride = 0) {
  std::mt19937 rng(seed);
  Problem p;
  p.form = {std::string(to_string(a_scaling)) + " x " + std::string(to_string(b_scaling)) +
                " -> bf16 + bias",
            ElemType::e4m3, ElemType::e4m3, ElemType::bf16, true};
  p.shape = s;
  p.a = testing::random_matrix(ElemType::e4m3, s.m, s.k, s.k, 8.0, rng);
  p.b = testing::random_matrix(ElemType::e4m3, s.n, s.k, s.k, 8.0, rng);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  const std::int64_t nb = (s.k + 127) / 128;
  const std::int64_t stride = tile_stride ? tile_stride : nb;
  const auto block_scales = [&](HostMatrix& m, Scaling scaling) {
    const bool row = scaling == Scaling::block_1x128;
    const std::int64_t rows = row ? m.rows : (m.rows + 127) / 128;
    std::vector<float> scales(static_cast<std::size_t>(rows * (row ? nb : stride)));
    for (float& x : scales) x = scale(rng);
    // 1x128: K-block-major [nb][rows]; 128x128: [ceil(rows/128)][stride].
    const auto at = [&](std::int64_t r, std::int64_t kb) {
      return row ? scales[kb * rows + r] : scales[(r / 128) * stride + kb];
    };
    for (std::int64_t r = 0; r < m.rows; ++r)
      for (std::int64_t c = 0; c < m.cols; ++c) m.values[r * m.cols + c] *= at(r, c / 128);
    DeviceBuffer buffer(scales.size() * 4);
    buffer.upload(scales.data(), scales.size() * 4);
    return buffer;
  };
  p.a_scales = block_scales(p.a, a_scaling);
  p.b_scales = block_scales(p.b, b_scaling);
  finish(p, rng);
  p.args.a.scaling = a_scaling;
  p.args.a.scale_inv = p.a_scales.get();
  p.args.a.scale_order = BlockScaleOrder::k_block_major;
  p.args.b.scaling = b_scaling;
  p.args.b.scale_inv = p.b_scales.get();
  p.args.b.scale_order = BlockScaleOrder::k_block_major;
  if (tile_stride) p.args.a.scale_stride = p.args.b.scale_stride = tile_stride;
  return p;
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
