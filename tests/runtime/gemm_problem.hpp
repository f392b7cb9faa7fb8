// The GEMM GPU tests' problems, shared by every GemmRunner's tests
// (cuBLASLt's, the generated GEMM's): random operands of one form and shape,
// uploaded with their scales, the arguments a runner takes, and the check of
// D against the float64 reference (gemm_reference.hpp). Outputs are poisoned
// (0xFF: NaN in every float type) before each run, so an element left
// unwritten fails.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gemm_reference.hpp"
#include "runtime/cpu/activation.hpp"
#include "runtime/device.hpp"
#include "runtime/gemm/gemm.hpp"
#include "runtime/reference/activation_bound.hpp"

namespace fp8c::runtime::gemm_test {

using testing::decode;
using testing::GemmReference;
using testing::HostMatrix;

inline constexpr unsigned char kPoison = 0xFF;

inline DeviceBuffer upload(const std::vector<unsigned char>& bytes) {
  DeviceBuffer buffer(bytes.size());
  buffer.upload(bytes.data(), bytes.size());
  return buffer;
}

template <typename T>
inline std::vector<T> download(const DeviceBuffer& buffer, std::size_t count) {
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
  // Another activation than GELU (when `gelu` is false): relu or silu.
  Activation activation = Activation::none;
  // The backward's epilogue (the generated GEMM): D = act'(aux) * A.B^T with
  // aux a random pre-activation in aux_type; D's column sums into dbias; an
  // FP8 D's transposed copy.
  Activation dact = Activation::none;
  bool dbias = false;
  ElemType dbias_type = ElemType::fp32;
  bool transposed = false;

  Activation act() const { return gelu ? Activation::gelu : activation; }
};

struct Shape {
  std::int64_t m, n, k;
  std::int64_t pad = 0;  // extra elements in every leading dimension
};

inline std::string describe(const Form& f, const Shape& s) {
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
  std::vector<double> pre_activation;  // dact: the aux read, decoded, [M][N]
  float d_scale = 1.0f;
  GemmReference ref;
  DeviceBuffer da, db, dd, dbias, daux, scalars, a_scales, b_scales;
  DeviceBuffer ddbias, dworkspace, dd_t;  // dbias out, its workspace, D^T
  GemmArgs args;

  std::size_t d_bytes() const {
    return static_cast<std::size_t>(shape.m * args.ldd) * element_bytes(form.d);
  }
  std::size_t aux_bytes() const {
    return static_cast<std::size_t>(shape.m * args.ld_aux) * element_bytes(form.aux_type);
  }
  std::size_t d_t_bytes() const { return static_cast<std::size_t>(shape.n * args.ld_dt); }
  // D's element (i, j) as the reference wants it, before an FP8 D's scaling.
  double want(std::size_t r, double z) const {
    if (form.dact != Activation::none)
      return cpu::activation_grad(form.dact, pre_activation[r]) * z;
    return testing::activation(form.act(), z);
  }
};

// Scalars live in one buffer, 16 bytes apart.
inline constexpr std::size_t kAScaleAt = 0, kBScaleAt = 16, kDScaleAt = 32, kAmaxAt = 48;

// Per-tensor scales that are not powers of two, so a scale applied twice,
// or to the wrong operand, shows.
inline constexpr float kAScaleInv = 0.0371f, kBScaleInv = 0.0123f;

inline void finish(Problem& p, std::mt19937& rng) {
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
  std::vector<unsigned char> pre_bytes;
  if (f.dact != Activation::none) {
    // Pre-activations around GELU's and SiLU's bends, rounded to aux_type.
    const std::size_t size = element_bytes(f.aux_type);
    pre_bytes.assign(static_cast<std::size_t>(s.m * (s.n + s.pad)) * size, 0);
    std::normal_distribution<double> normal(0.0, 2.0);
    for (std::int64_t i = 0; i < s.m; ++i)
      for (std::int64_t j = 0; j < s.n; ++j) {
        unsigned char* at = &pre_bytes[static_cast<std::size_t>(i * (s.n + s.pad) + j) * size];
        testing::encode(f.aux_type, static_cast<float>(normal(rng)), at);
        p.pre_activation.push_back(decode(f.aux_type, at));
      }
  }
  if (is_fp8(f.d)) {
    // Most of FP8's range, without overflow (the saturation test overflows on purpose).
    double max_want = 0;
    for (std::size_t r = 0; r < p.ref.pre.size(); ++r)
      max_want = std::max(max_want, std::fabs(p.want(r, p.ref.pre[r])));
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
  g.activation = f.act();
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
  if (f.dact != Activation::none) {
    g.dact = f.dact;
    p.daux.upload(pre_bytes.data(), pre_bytes.size());
  }
  if (f.dbias) {
    g.dbias_type = f.dbias_type;
    p.ddbias = DeviceBuffer(static_cast<std::size_t>(s.n) * element_bytes(f.dbias_type));
    g.dbias = p.ddbias.get();
    p.dworkspace = DeviceBuffer(dbias_workspace_bytes(s.m, s.n));
    g.dbias_workspace = p.dworkspace.get();
  }
  if (f.transposed) {
    g.ld_dt = s.m + s.pad;
    p.dd_t = DeviceBuffer(p.d_t_bytes());
    g.d_t = p.dd_t.get();
  }
}

// Per-tensor (FP8) or unscaled (high-precision) operands.
inline Problem make_problem(const Form& f, const Shape& s, std::uint32_t seed) {
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
inline void check(Problem& p, double times = 1.0) {
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
  std::vector<double> column_want(static_cast<std::size_t>(p.shape.n), 0.0);
  std::vector<double> column_tol(column_want.size(), 0.0), column_abs(column_want.size(), 0.0);
  for (std::int64_t i = 0; i < p.shape.m; ++i)
    for (std::int64_t j = 0; j < p.shape.n; ++j) {
      const std::size_t r = static_cast<std::size_t>(i * p.shape.n + j);
      const double z = times * p.ref.pre[r];
      const double eps =
          f.fast_accumulate ? testing::kFastAccumulationEps : testing::kAccumulationEps;
      const double acc = times * eps * p.ref.abs_sum[r];
      double want = z, tol = acc;
      if (f.dact != Activation::none) {
        // act'(x) z: z's error times |act'| (at most GELU's 1.13), and the
        // fast dact's error (activation_bound.hpp) times |z|.
        const double x = p.pre_activation[r];
        want = p.want(r, z);
        tol = testing::kGeluSlope * acc +
              runtime::activation_grad_error_bound(f.dact, static_cast<float>(x)) *
                  (std::fabs(z) + acc);
      } else if (f.act() != Activation::none) {
        // The activations' largest slopes are GELU's (1.13; SiLU's 1.1,
        // ReLU's 1); 5e-4 covers the hardware tanh and __expf.
        want = testing::activation(f.act(), z);
        tol = testing::kGeluSlope * acc + 5e-4 * (1.0 + std::fabs(z));
      }
      if (f.dbias) {
        column_want[static_cast<std::size_t>(j)] += want;
        column_tol[static_cast<std::size_t>(j)] += tol + std::fabs(want) * 0x1p-23;
        column_abs[static_cast<std::size_t>(j)] += std::fabs(want);
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
      if (f.aux && f.dact == Activation::none) {
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
  if (f.transposed) {
    // The same bits as D, transposed.
    const auto d_t = download<unsigned char>(p.dd_t, p.d_t_bytes());
    std::size_t differ = 0;
    std::ostringstream where;
    for (std::int64_t i = 0; i < p.shape.m; ++i)
      for (std::int64_t j = 0; j < p.shape.n; ++j)
        if (d_t[static_cast<std::size_t>(j * g.ld_dt + i)] !=
                d[static_cast<std::size_t>(i * g.ldd + j)] &&
            differ++ < 5)
          where << "\n  D^T[" << j << "][" << i << "] differs from D[" << i << "][" << j << "]";
    EXPECT_EQ(differ, 0u) << where.str();
  }
  if (f.dbias) {
    // Each column's sum of the elements' errors, fp32 summation over M
    // (M 2^-24 of the sum of magnitudes), and one rounding to dbias_type.
    const auto bytes = download<unsigned char>(
        p.ddbias, static_cast<std::size_t>(p.shape.n) * element_bytes(f.dbias_type));
    std::size_t off = 0;
    std::ostringstream where;
    for (std::int64_t j = 0; j < p.shape.n; ++j) {
      const std::size_t c = static_cast<std::size_t>(j);
      const double got = decode(f.dbias_type, &bytes[c * element_bytes(f.dbias_type)]);
      const double want = column_want[c];
      const double limit = column_tol[c] + double(p.shape.m) * 0x1p-24 * column_abs[c] +
                           testing::output_rounding(f.dbias_type) * std::fabs(want) +
                           testing::output_floor(f.dbias_type);
      // A sum past the type's range rounds to +-inf (IEEE round to nearest);
      // one within `limit` of it may land either side.
      const double top = testing::output_max(f.dbias_type);
      const bool overflows = std::fabs(want) - limit > top;
      const bool may_overflow = std::fabs(want) + limit > top;
      const bool right_inf = std::isinf(got) && std::signbit(got) == std::signbit(want);
      const bool ok =
          overflows ? right_inf : std::fabs(got - want) <= limit || (may_overflow && right_inf);
      if (!ok && off++ < 5)
        where << "\n  dbias[" << j << "] = " << got << ", want " << column_want[c] << " +- "
              << limit;
    }
    EXPECT_EQ(off, 0u) << "of " << p.shape.n << " columns" << where.str();
  }
  if (f.amax) {
    EXPECT_NEAR(amax, want_amax, amax_tol) << "amax of D before d_scale";
  }
  // The margin, for whoever tunes the tolerance: 1.0 would be at the limit.
  ::testing::Test::RecordProperty("worst_error_over_limit", std::to_string(worst));
}

inline void poison(Problem& p, CUstream stream) {
  p.dd.fill(kPoison, stream);
  if (p.form.aux && p.form.dact == Activation::none) p.daux.fill(kPoison, stream);  // dact reads it
  if (p.form.dbias) {
    p.ddbias.fill(kPoison, stream);
    p.dworkspace.fill(kPoison, stream);
  }
  if (p.form.transposed) p.dd_t.fill(kPoison, stream);
  // The amax slot only: the scales beside it are inputs.
  FP8C_CU(driver().cuMemsetD8Async(p.scalars.get() + kAmaxAt, kPoison, 4, stream));
}

inline void run_and_check(GemmRunner& runner, Problem& p) {
  SCOPED_TRACE(describe(p.form, p.shape));
  std::string why;
  ASSERT_TRUE(runner.supports(p.args, &why)) << why;
  Stream stream;
  poison(p, stream.get());
  runner.run(p.args, stream.get());
  stream.synchronize();
  check(p);
}

// An epilogue form run with block or MX scales: its name after the scaling's,
// the operand types given, and promoted accumulation (what scales need).
inline Form scaled_form(const Form& epilogue, const std::string& scaling, ElemType a, ElemType b) {
  Form f = epilogue;
  f.name = scaling + ", " + epilogue.name;
  f.a = a;
  f.b = b;
  f.fast_accumulate = false;
  return f;
}

// 1x128 and 128x128 block scaling: scales uploaded in the layout cuBLASLt
// reads (cublaslt_requirements.hpp), each element's value scaled by its block.
// `tile_stride`: floats from one row of 128x128 blocks to the next (0: packed,
// ceil(K / 128)). `order`: where 1x128 scales keep their blocks (cuBLASLt
// reads K-block-major only).
// `epilogue`, when given, sets D's type and the epilogue (bias, activation,
// aux, amax) instead of bf16 D with `bias`.
inline Problem make_block_problem(Scaling a_scaling, Scaling b_scaling, const Shape& s,
                                  std::uint32_t seed, std::int64_t tile_stride = 0,
                                  bool bias = true,
                                  BlockScaleOrder order = BlockScaleOrder::k_block_major,
                                  const Form* epilogue = nullptr) {
  std::mt19937 rng(seed);
  Problem p;
  p.form = {std::string(to_string(a_scaling)) + " x " + std::string(to_string(b_scaling)) +
                (order == BlockScaleOrder::row_major ? " (row-major 1x128 scales)" : "") +
                " -> bf16" + (bias ? " + bias" : ""),
            ElemType::e4m3, ElemType::e4m3, ElemType::bf16, bias};
  if (epilogue)
    p.form = scaled_form(
        *epilogue, std::string(to_string(a_scaling)) + " x " + std::string(to_string(b_scaling)),
        ElemType::e4m3, ElemType::e4m3);
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
    // 1x128: K-block-major [nb][rows] or row-major [rows][nb];
    // 128x128: [ceil(rows/128)][stride].
    const bool k_block_major = order == BlockScaleOrder::k_block_major;
    const auto at = [&](std::int64_t r, std::int64_t kb) {
      if (!row) return scales[(r / 128) * stride + kb];
      return k_block_major ? scales[kb * rows + r] : scales[r * nb + kb];
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
  p.args.a.scale_order = order;
  p.args.b.scaling = b_scaling;
  p.args.b.scale_inv = p.b_scales.get();
  p.args.b.scale_order = order;
  if (tile_stride) p.args.a.scale_stride = p.args.b.scale_stride = tile_stride;
  return p;
}

// MXFP8: 1x32 blocks with E8M0 codes, each element's value times
// 2^(code - 127): row-major [rows][code_stride] bytes (code_stride 0:
// packed, ceil(K / 32)), or with `order` K-block-major [ceil(K / 32)]
// [code_stride] (0: packed, rows); padding bytes are NaN codes, which must
// not be read. Codes from 2^-8 to 2^2, so that both operands' blocks differ
// within every row and column; `a`, `b` the element types; `epilogue` as for
// make_block_problem.
inline Problem make_mx_problem(const Shape& s, std::uint32_t seed, ElemType a = ElemType::e4m3,
                               ElemType b = ElemType::e4m3, std::int64_t code_stride = 0,
                               const Form* epilogue = nullptr,
                               BlockScaleOrder order = BlockScaleOrder::row_major) {
  const bool k_major = order == BlockScaleOrder::k_block_major;
  std::mt19937 rng(seed);
  Problem p;
  p.form = {std::string(to_string(a)) + " x " + std::string(to_string(b)) + " mx_1x32" +
                (k_major ? " (codes K-block-major)" : "") +
                (code_stride ? " (code rows padded)" : "") + " -> bf16 + bias",
            a, b, ElemType::bf16, true};
  if (epilogue)
    p.form = scaled_form(*epilogue,
                         std::string(to_string(a)) + " x " + std::string(to_string(b)) +
                             " mx_1x32" + (k_major ? " (codes K-block-major)" : ""),
                         a, b);
  p.shape = s;
  p.a = testing::random_matrix(a, s.m, s.k, s.k, 8.0, rng);
  p.b = testing::random_matrix(b, s.n, s.k, s.k, 8.0, rng);
  const std::int64_t codes = (s.k + 31) / 32;
  std::uniform_int_distribution<int> code(127 - 8, 127 + 2);
  const auto mx_scales = [&](HostMatrix& m) {
    const std::int64_t stride = code_stride ? code_stride : k_major ? m.rows : codes;
    const auto at = [&](std::int64_t r, std::int64_t kb) {
      return static_cast<std::size_t>(k_major ? kb * stride + r : r * stride + kb);
    };
    std::vector<unsigned char> bytes(static_cast<std::size_t>((k_major ? codes : m.rows) * stride),
                                     0xFF);
    for (std::int64_t r = 0; r < m.rows; ++r)
      for (std::int64_t kb = 0; kb < codes; ++kb)
        bytes[at(r, kb)] = static_cast<unsigned char>(code(rng));
    for (std::int64_t r = 0; r < m.rows; ++r)
      for (std::int64_t c = 0; c < m.cols; ++c)
        m.values[r * m.cols + c] *= std::ldexp(1.0f, bytes[at(r, c / 32)] - 127);
    return upload(bytes);
  };
  p.a_scales = mx_scales(p.a);
  p.b_scales = mx_scales(p.b);
  finish(p, rng);
  for (GemmOperand* o : {&p.args.a, &p.args.b}) o->scaling = Scaling::mx_1x32;
  p.args.a.scale_inv = p.a_scales.get();
  p.args.b.scale_inv = p.b_scales.get();
  p.args.a.scale_stride = p.args.b.scale_stride = code_stride;
  p.args.a.scale_order = p.args.b.scale_order = order;
  return p;
}

}  // namespace fp8c::runtime::gemm_test
