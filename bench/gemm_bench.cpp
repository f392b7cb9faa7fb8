// GPU benchmark of the generated FP8 GEMM against cuBLASLt (a benchmark, not
// a test), on the shapes, per-tensor (fast accumulation) and
// 1x128 x 128x128 block-scaled, bf16 D; and "fused": per-tensor with bias,
// GELU, an e4m3 D with its scale and amax, against the same generated GEMM
// with a plain bf16 D (what the fusion costs) and cuBLASLt's fused epilogue; "backward": the
// dgrad epilogue that hands the layer below its FP8 input gradient (GELU's gradient from a saved
// bf16 pre-activation, dbias, e5m2 D with its amax and its transposed copy), against the same
// generated GEMM with a plain bf16 D and cuBLASLt's plain GEMM (it has no such epilogue for FP8
// output); and "mx": MXFP8
// (1x32 blocks, E8M0 scale codes) by promotion per 32 K, against cuBLASLt's 1x128 x 128x128
// block-scaled GEMM on the same FP8 bytes (Hopper's cuBLASLt has no MXFP8 GEMM: the nearest
// form a block-scaled user has), the codes K-block-major as the executor's layers hand them
// after a byte transpose (--mx-row-major: as the quantizers write them, the slower form). Follows
// the device METHOD: FLOPs counted, each runner's D checked before timing (against a float64
// reference on sampled elements, and the two runners against each other on every element), warm-up,
// median of many runs timed with CUDA events, operand sets rotated so that no run finds its inputs
// in L2.
//
//   build/bench/gemm_bench [--iters N] [--json FILE]
//                          [--only per_tensor|block|fused|backward|mx[,...]]
//                          [--promoted] [--mx-row-major] [--table FILE]
//                          [--shape MxNxK]...
//
// --table FILE writes the verified per-tensor (with --promoted: how layers run them) and
// block-scaled measurements as the table `gemm = auto` picks backends by
// (codegen/lower/gemm_table.hpp); put it at $FP8C_GEMM_TABLE or gemm_table.txt in the cubin cache.
//
// cuBLASLt here is fp8c's runner (runtime/gemm): the heuristic's first
// algorithm, as the executor calls it. bench/gpu.sh also runs the peers'
// cuBLASLt programs (best of the heuristic's top candidates) in the same call.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "codegen/lower/gemm_table.hpp"
#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "runtime/cpu/activation.hpp"
#include "runtime/device.hpp"
#include "runtime/gemm/generated_gemm.hpp"

using namespace fp8c;
using namespace fp8c::runtime;

namespace {

struct Shape {
  std::int64_t m, n, k;
};

enum class Mode { per_tensor, block, fused, backward, mx };

// --promoted: per-tensor GEMMs promote every 128 K (what the executor's
// layers run) instead of accumulating fast.
bool g_promoted = false;
// --mx-row-major: MXFP8 codes row-major ([rows][K / 32]) instead of K-block-major.
bool g_mx_row_major = false;

const char* mode_name(Mode m) {
  return m == Mode::per_tensor ? (g_promoted ? "per_tensor_promoted" : "per_tensor_fast")
         : m == Mode::block    ? "block_1x128_128x128"
         : m == Mode::mx       ? (g_mx_row_major ? "mxfp8_1x32_row_major_codes" : "mxfp8_1x32")
         : m == Mode::backward ? "backward_dgelu_dbias_e5m2_amax_transposed"
                               : "fused_bias_gelu_e4m3_amax";
}

struct Result {
  std::string name;
  Shape shape;
  std::string config;
  double ours_ms = 0, cublaslt_ms = 0;
  double plain_ms = 0;  // fused, backward: the generated GEMM with a plain bf16 D
  // backward: without dbias (its GEMM-side sums and the reduction kernel),
  // and without D^T, to say what each part costs.
  double no_dbias_ms = 0, no_transpose_ms = 0;
  double ours_tflops = 0, cublaslt_tflops = 0;
  double max_error_over_limit = 0;
  bool verified = false;
};

// Fast, reproducible random FP8 bytes: finite, magnitudes 2^-3..2^4 (e4m3),
// either sign, about 1 in 64 zero.
std::vector<unsigned char> random_fp8(std::size_t n, std::uint64_t seed) {
  std::vector<unsigned char> v(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const unsigned r = static_cast<unsigned>(x >> 24);
    b = (r & 63) == 0 ? 0 : static_cast<unsigned char>((r & 0x80) | (0x20 + (r >> 8) % 0x38));
  }
  return v;
}

std::vector<float> random_scales(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  std::uint64_t x = seed + 12345;
  for (auto& s : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s = 0.002f + 0.018f * static_cast<float>((x >> 40) & 0xFFFF) / 65535.0f;
  }
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One operand set on the device and on the host (for the reference).
struct Operands {
  std::vector<unsigned char> a, b;
  std::vector<float> sa, sb;          // block scales (1x128 K-block-major, 128x128), or one each
  std::vector<unsigned char> ca, cb;  // mx: E8M0 codes, [rows][ceil(K / 32)] (on the device
                                      // K-block-major, unless --mx-row-major)
  DeviceBuffer da, db, dsa, dsb, dca, dcb;
};

// MXFP8 scale codes: 2^-8..2^2 (119..129), the spread a quantizer gives
// rows of moderately different magnitudes.
std::vector<unsigned char> random_codes(std::size_t n, std::uint64_t seed) {
  std::vector<unsigned char> v(n);
  std::uint64_t x = seed * 2862933555777941757ull + 3037000493ull;
  for (auto& c : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<unsigned char>(119 + (x >> 33) % 11);
  }
  return v;
}

Operands make_operands(const Shape& s, Mode mode, std::uint64_t seed, bool keep_host) {
  // The mx mode's peer reads the same bytes block-scaled.
  const bool block = mode == Mode::block || mode == Mode::mx;
  Operands o;
  o.a = random_fp8(static_cast<std::size_t>(s.m * s.k), seed);
  o.b = random_fp8(static_cast<std::size_t>(s.n * s.k), seed + 1);
  const std::int64_t nb = (s.k + 127) / 128;
  o.sa = random_scales(block ? static_cast<std::size_t>(nb * s.m) : 1, seed + 2);
  o.sb = random_scales(block ? static_cast<std::size_t>(((s.n + 127) / 128) * nb) : 1, seed + 3);
  o.da = DeviceBuffer(o.a.size());
  o.da.upload(o.a.data(), o.a.size());
  o.db = DeviceBuffer(o.b.size());
  o.db.upload(o.b.data(), o.b.size());
  o.dsa = DeviceBuffer(o.sa.size() * 4);
  o.dsa.upload(o.sa.data(), o.sa.size() * 4);
  o.dsb = DeviceBuffer(o.sb.size() * 4);
  o.dsb.upload(o.sb.data(), o.sb.size() * 4);
  if (mode == Mode::mx) {
    const std::size_t row_codes = static_cast<std::size_t>((s.k + 31) / 32);
    o.ca = random_codes(row_codes * static_cast<std::size_t>(s.m), seed + 4);
    o.cb = random_codes(row_codes * static_cast<std::size_t>(s.n), seed + 5);
    const auto upload_codes = [&](const std::vector<unsigned char>& codes, std::int64_t rows) {
      std::vector<unsigned char> t = codes;
      if (!g_mx_row_major)
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::size_t j = 0; j < row_codes; ++j)
            t[j * static_cast<std::size_t>(rows) + static_cast<std::size_t>(r)] =
                codes[static_cast<std::size_t>(r) * row_codes + j];
      DeviceBuffer d(t.size());
      d.upload(t.data(), t.size());
      return d;
    };
    o.dca = upload_codes(o.ca, s.m);
    o.dcb = upload_codes(o.cb, s.n);
  }
  if (!keep_host) {
    o.a = {};
    o.b = {};
  }
  return o;
}

// The fused mode's D scale: D is about 0.1 in magnitude, this puts it
// well inside e4m3's normal range without saturating.
constexpr float kDScale = 100.0f;

// The fused epilogue's extra operands: a bf16 bias, D's scale and amax;
// the backward one's: a bf16 pre-activation, dbias, its workspace, D^T.
struct Epilogue {
  std::vector<float> bias;
  DeviceBuffer dbias, scalars;     // scalars: d_scale at 0, amax at 16
  std::vector<std::uint16_t> pre;  // backward: [M][N] bf16 bits
  DeviceBuffer dpre, grad_bias, workspace, d_t;
};

// A pre-activation around GELU's bend: a hash of the position, +-3.
float pre_activation_at(std::int64_t i, std::int64_t j) {
  const std::uint64_t h = (static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull) ^
                          (static_cast<std::uint64_t>(j) * 0xC2B2AE3D27D4EB4Full);
  return 6.0f * static_cast<float>((h >> 40) & 0xFFFF) / 65535.0f - 3.0f;
}

Epilogue make_epilogue(const Shape& s, Mode mode) {
  Epilogue e;
  if (mode == Mode::backward) {
    e.pre.resize(static_cast<std::size_t>(s.m * s.n));
    for (std::int64_t i = 0; i < s.m; ++i)
      for (std::int64_t j = 0; j < s.n; ++j)
        e.pre[static_cast<std::size_t>(i * s.n + j)] =
            numerics::float_to_bf16(pre_activation_at(i, j));
    e.dpre = DeviceBuffer(e.pre.size() * 2);
    e.dpre.upload(e.pre.data(), e.pre.size() * 2);
    e.grad_bias = DeviceBuffer(static_cast<std::size_t>(s.n) * 4);
    e.workspace = DeviceBuffer(dbias_workspace_bytes(s.m, s.n));
    e.d_t = DeviceBuffer(static_cast<std::size_t>(s.m * s.n));
  }
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(s.n));
  for (std::int64_t j = 0; j < s.n; ++j) {
    bits[j] = numerics::float_to_bf16(0.05f * static_cast<float>((j * 37) % 11 - 5));
    e.bias.push_back(numerics::bf16_to_float(bits[j]));
  }
  e.dbias = DeviceBuffer(bits.size() * 2);
  e.dbias.upload(bits.data(), bits.size() * 2);
  const float scalars[8] = {kDScale, 0, 0, 0, 0, 0, 0, 0};
  e.scalars = DeviceBuffer(sizeof scalars);
  e.scalars.upload(scalars, sizeof scalars);
  return e;
}

GemmArgs args_for(const Shape& s, Mode mode, const Operands& o, CUdeviceptr d) {
  const bool block = mode == Mode::block, mx = mode == Mode::mx;
  const Scaling sa = mx ? Scaling::mx_1x32 : block ? Scaling::block_1x128 : Scaling::per_tensor;
  const Scaling sb = mx ? Scaling::mx_1x32 : block ? Scaling::block_128x128 : Scaling::per_tensor;
  GemmArgs g;
  g.a = {o.da.get(), ElemType::e4m3, s.m, s.k, s.k, sa, mx ? o.dca.get() : o.dsa.get()};
  if (!mx || !g_mx_row_major) g.a.scale_order = BlockScaleOrder::k_block_major;
  g.b = {o.db.get(), ElemType::e4m3, s.n, s.k, s.k, sb, mx ? o.dcb.get() : o.dsb.get()};
  if (mx && !g_mx_row_major) g.b.scale_order = BlockScaleOrder::k_block_major;
  g.d = d;
  g.d_type = ElemType::bf16;
  g.ldd = s.n;
  g.fast_accumulate = !block && !mx && !g_promoted;
  return g;
}

// D[i][j] in float64 from the operands as stored, and sum |a b| for the bound.
void reference(const Shape& s, Mode mode, const Operands& o, std::int64_t i, std::int64_t j,
               double* value, double* abs_sum) {
  const bool block = mode == Mode::block, mx = mode == Mode::mx;
  const std::int64_t width = mx ? 32 : 128, nb = (s.k + width - 1) / width;
  double sum = 0, mag = 0;
  for (std::int64_t kb = 0; kb < nb; ++kb) {
    double part = 0, part_mag = 0;
    for (std::int64_t q = kb * width; q < std::min(s.k, (kb + 1) * width); ++q) {
      const double x = numerics::fp8_to_float(o.a[i * s.k + q], ElemType::e4m3);
      const double y = numerics::fp8_to_float(o.b[j * s.k + q], ElemType::e4m3);
      part += x * y;
      part_mag += std::fabs(x * y);
    }
    const double scale = mx ? std::ldexp(1.0, int(o.ca[i * nb + kb]) + int(o.cb[j * nb + kb]) - 254)
                         : block ? double(o.sa[kb * s.m + i]) * o.sb[(j / 128) * nb + kb]
                                 : double(o.sa[0]) * o.sb[0];
    sum += part * scale;
    mag += part_mag * std::fabs(scale);
  }
  *value = sum;
  *abs_sum = mag;
}

// The fused form of `g`: + bias, GELU, e4m3 D = fp8(D * kDScale), amax.
GemmArgs fused(GemmArgs g, const Epilogue& e) {
  g.bias = e.dbias.get();
  g.bias_type = ElemType::bf16;
  g.activation = Activation::gelu;
  g.d_type = ElemType::e4m3;
  g.d_scale = e.scalars.get();
  g.d_amax = e.scalars.get() + 16;
  return g;
}

// The backward form of `g`: D = gelu'(pre) * D, dbias, e5m2 D = fp8(D *
// kDScale) with its amax and its transposed copy.
GemmArgs backward(GemmArgs g, const Epilogue& e, std::int64_t m) {
  g.dact = Activation::gelu;
  g.aux = e.dpre.get();
  g.aux_type = ElemType::bf16;
  g.ld_aux = g.ldd;
  g.dbias = e.grad_bias.get();
  g.dbias_type = ElemType::fp32;
  g.dbias_workspace = e.workspace.get();
  g.d_type = ElemType::e5m2;
  g.d_scale = e.scalars.get();
  g.d_amax = e.scalars.get() + 16;
  g.d_t = e.d_t.get();
  g.ld_dt = m;
  return g;
}

// The backward mode's check: sampled elements of the e5m2 D against float64
// (gelu' of the stored pre-activation, the scale, one e5m2 rounding), D^T
// bit for bit D transposed everywhere, the amax against the largest sampled
// |D|, and dbias on a few columns against their float64 sums over all M.
bool check_backward(GeneratedGemmRunner& ours, const Shape& s, const Operands& o, Epilogue& e,
                    Stream& stream, double* worst_out) {
  const std::size_t elements = static_cast<std::size_t>(s.m * s.n);
  DeviceBuffer d(elements);
  const GemmArgs g = backward(args_for(s, Mode::backward, o, d.get()), e, s.m);
  std::string why;
  if (!ours.supports(g, &why)) throw std::runtime_error("generated GEMM refuses: " + why);
  d.fill(0xFF, stream.get());
  e.d_t.fill(0xFF, stream.get());
  e.grad_bias.fill(0xFF, stream.get());
  e.workspace.fill(0xFF, stream.get());
  ours.run(g, stream.get());
  stream.synchronize();
  float amax = 0;
  e.scalars.download(&amax, 4, 16);
  std::vector<unsigned char> got(elements), got_t(elements);
  d.download(got.data(), elements);
  e.d_t.download(got_t.data(), elements);
  std::vector<float> dbias(static_cast<std::size_t>(s.n));
  e.grad_bias.download(dbias.data(), dbias.size() * 4);
  const auto value = [&](std::int64_t i, std::int64_t j, double* bound) {
    double z, mag;
    reference(s, Mode::backward, o, i, j, &z, &mag);
    const double x = numerics::bf16_to_float(e.pre[static_cast<std::size_t>(i * s.n + j)]);
    // Fast accumulation (2^-10 of sum |a b|) through gelu' (at most 1.13),
    // and the hardware tanh's error in gelu' (under 2^-10 x 8 for |x| <= 3).
    *bound = 1.13 * mag / 1024 + std::fabs(z) * 8.0 / 1024;
    return cpu::activation_grad(Activation::gelu, x) * z;
  };
  double worst = 0, sampled_amax = 0;
  for (int t = 0; t < 256; ++t) {
    const std::int64_t i = (t * 7919ll) % s.m, j = (t * 104729ll + t / 3) % s.n;
    double bound;
    const double y = value(i, j, &bound);
    sampled_amax = std::max(sampled_amax, std::fabs(y));
    const double want = y * kDScale;
    const double have = numerics::fp8_to_float(got[i * s.n + j], ElemType::e5m2);
    // One e5m2 rounding (2^-3 relative, doubled) and its subnormal step.
    const double limit = bound * kDScale + std::fabs(want) / 4 + std::ldexp(1.0, -16);
    worst = std::max(worst, std::fabs(have - want) / limit);
  }
  std::size_t differ = 0;
  for (std::int64_t i = 0; i < s.m; ++i)
    for (std::int64_t j = 0; j < s.n; ++j)
      if (got_t[static_cast<std::size_t>(j * s.m + i)] !=
          got[static_cast<std::size_t>(i * s.n + j)])
        ++differ;
  // dbias: whole columns, so a row group left out or counted twice shows.
  for (std::int64_t j : {std::int64_t{0}, s.n / 3, s.n - 1}) {
    double sum = 0, sum_abs = 0, bound = 0;
    for (std::int64_t i = 0; i < s.m; ++i) {
      double b;
      const double v = value(i, j, &b);
      sum += v;
      sum_abs += std::fabs(v);
      bound += b;
    }
    // fp32 partial sums over M (M 2^-24 of the magnitudes at most).
    const double limit = bound + double(s.m) * 0x1p-24 * sum_abs + 1e-6;
    worst = std::max(worst, std::fabs(dbias[static_cast<std::size_t>(j)] - sum) / limit);
  }
  const bool amax_ok = amax >= sampled_amax * (1 - 1.0 / 64) && std::isfinite(amax);
  *worst_out = worst;
  if (worst > 1.0 || differ != 0 || !amax_ok)
    std::cerr << "backward " << s.m << "x" << s.n << "x" << s.k << ": CHECK FAILED (worst " << worst
              << " x its limit, " << differ << " elements of D^T differ from D, amax " << amax
              << ", sampled " << sampled_amax << ")\n";
  return worst <= 1.0 && differ == 0 && amax_ok;
}

double gelu(double z) {
  return 0.5 * z * (1.0 + std::tanh(0.7978845608028654 * z * (1.0 + 0.044715 * z * z)));
}

std::vector<std::uint16_t> download_d(const DeviceBuffer& d) {
  std::vector<std::uint16_t> h(d.bytes() / 2);
  d.download(h.data(), d.bytes());
  return h;
}

// The fused mode's check: sampled elements of our e4m3 D against float64
// (bias, GELU, scale, one FP8 rounding), every element against cuBLASLt's
// fused D, and both amaxes against the largest sampled |D|.
bool check_fused(GeneratedGemmRunner& ours, GemmRunner& cublaslt, const Shape& s, const Operands& o,
                 const Epilogue& e, Stream& stream, double* worst_out) {
  const std::size_t elements = static_cast<std::size_t>(s.m * s.n);
  DeviceBuffer d_ours(elements), d_lt(elements);
  const GemmArgs g_ours = fused(args_for(s, Mode::fused, o, d_ours.get()), e);
  const GemmArgs g_lt = fused(args_for(s, Mode::fused, o, d_lt.get()), e);
  std::string why;
  if (!ours.supports(g_ours, &why)) throw std::runtime_error("generated GEMM refuses: " + why);
  if (!cublaslt.supports(g_lt, &why)) throw std::runtime_error("cuBLASLt refuses: " + why);
  d_ours.fill(0xFF, stream.get());
  d_lt.fill(0xFF, stream.get());
  ours.run(g_ours, stream.get());
  stream.synchronize();
  float amax_ours = 0, amax_lt = 0;
  e.scalars.download(&amax_ours, 4, 16);
  cublaslt.run(g_lt, stream.get());
  stream.synchronize();
  e.scalars.download(&amax_lt, 4, 16);
  std::vector<unsigned char> got(elements), lt(elements);
  d_ours.download(got.data(), elements);
  d_lt.download(lt.data(), elements);
  double worst = 0, sampled_amax = 0;
  for (int t = 0; t < 256; ++t) {
    const std::int64_t i = (t * 7919ll) % s.m, j = (t * 104729ll + t / 3) % s.n;
    double z, mag;
    reference(s, Mode::fused, o, i, j, &z, &mag);
    z += e.bias[j];
    const double y = gelu(z);
    sampled_amax = std::max(sampled_amax, std::fabs(y));
    const double want = y * kDScale;
    const double have = numerics::fp8_to_float(got[i * s.n + j], ElemType::e4m3);
    // Fast accumulation (2^-10 of sum |a b|) through GELU's slope, the
    // hardware tanh, one e4m3 rounding (2^-4), e4m3's subnormal step.
    const double limit = (1.13 * mag / 1024 + 5e-4 * (1 + std::fabs(z))) * kDScale +
                         std::fabs(want) / 16 + 1.0 / 512;
    worst = std::max(worst, std::fabs(have - want) / limit);
  }
  std::size_t differ = 0;
  for (std::size_t x = 0; x < elements; ++x) {
    const double a = numerics::fp8_to_float(got[x], ElemType::e4m3);
    const double b = numerics::fp8_to_float(lt[x], ElemType::e4m3);
    // Two summation orders and two e4m3 roundings apart.
    if (!(std::fabs(a - b) <= std::fabs(b) / 8 + 1.0 / 256)) ++differ;
  }
  const bool amax_ok =
      amax_ours >= sampled_amax * (1 - 1.0 / 64) && std::fabs(amax_ours - amax_lt) <= amax_lt / 64;
  *worst_out = worst;
  if (worst > 1.0 || differ != 0 || !amax_ok)
    std::cerr << "fused " << s.m << "x" << s.n << "x" << s.k << ": CHECK FAILED (worst sampled "
              << worst << " x its limit, " << differ << " elements differ from cuBLASLt, amax "
              << amax_ours << " against cuBLASLt's " << amax_lt << ", sampled " << sampled_amax
              << ")\n";
  return worst <= 1.0 && differ == 0 && amax_ok;
}

Result run_case(GeneratedGemmRunner& ours, GemmRunner& cublaslt, const Shape& s, Mode mode,
                int iters) {
  // The peer's form: the mx mode times cuBLASLt block-scaled on the same
  // bytes; the backward mode its plain per-tensor GEMM.
  const Mode peer_mode = mode == Mode::mx         ? Mode::block
                         : mode == Mode::backward ? Mode::per_tensor
                                                  : mode;
  Result r;
  r.name = std::string(mode_name(mode)) + "_" + std::to_string(s.m) + "x" + std::to_string(s.n) +
           "x" + std::to_string(s.k);
  r.shape = s;
  Stream stream;
  // Enough operand sets that one pass over them is over twice the 60 MB L2.
  const double set_bytes = double(s.m + s.n) * s.k;
  const int sets = std::clamp(static_cast<int>(std::ceil(120e6 / set_bytes)), 1, 8);
  std::vector<Operands> operands;
  for (int i = 0; i < sets; ++i) operands.push_back(make_operands(s, mode, 7 + 11 * i, i == 0));
  DeviceBuffer d_ours(static_cast<std::size_t>(s.m * s.n) * 2);
  DeviceBuffer d_lt(static_cast<std::size_t>(s.m * s.n) * 2);
  const GemmArgs check_ours = args_for(s, mode, operands[0], d_ours.get());
  const GemmArgs check_lt = args_for(s, peer_mode, operands[0], d_lt.get());
  r.config = ours.choice(check_ours).kernel.name() + " on " +
             std::to_string(ours.launch_ctas(check_ours)) + " CTAs";
  std::string why;
  if (!ours.supports(check_ours, &why)) throw std::runtime_error("generated GEMM refuses: " + why);
  if (!cublaslt.supports(check_lt, &why)) throw std::runtime_error("cuBLASLt refuses: " + why);

  // Check: sampled elements against float64; every element against cuBLASLt.
  d_ours.fill(0xFF, stream.get());
  d_lt.fill(0xFF, stream.get());
  ours.run(check_ours, stream.get());
  cublaslt.run(check_lt, stream.get());
  stream.synchronize();
  const auto got = download_d(d_ours), lt = download_d(d_lt);
  double worst = 0;
  for (int t = 0; t < 256; ++t) {
    const std::int64_t i = (t * 7919ll) % s.m, j = (t * 104729ll + t / 3) % s.n;
    double want, mag;
    reference(s, mode, operands[0], i, j, &want, &mag);
    const double have = numerics::bf16_to_float(got[i * s.n + j]);
    const double limit = mag / 4096 + std::fabs(want) / 128;
    worst = std::max(worst, std::fabs(have - want) / limit);
  }
  double rms = 0;
  for (auto x : lt) rms += double(numerics::bf16_to_float(x)) * numerics::bf16_to_float(x);
  rms = std::sqrt(rms / lt.size());
  std::size_t differ = 0;
  for (std::size_t e = 0; e < got.size(); ++e) {
    const double x = numerics::bf16_to_float(got[e]), y = numerics::bf16_to_float(lt[e]);
    if (mode == Mode::mx) {
      // Another product than cuBLASLt's: every element written (the poison
      // is a NaN) and finite is what can be checked on all of D.
      if (!std::isfinite(x)) ++differ;
      continue;
    }
    // Two summation orders and two roundings to bf16 apart; a misplaced
    // element or a wrong scale is off by about rms.
    if (!(std::fabs(x - y) <= std::fabs(y) / 64 + rms / 16)) ++differ;
  }
  bool ok = worst <= 1.0 && differ == 0;
  Epilogue epilogue = make_epilogue(s, mode);
  if (mode == Mode::backward) {
    double backward_worst = 0;
    ok = check_backward(ours, s, operands[0], epilogue, stream, &backward_worst) && ok;
    worst = std::max(worst, backward_worst);
    r.config = ours.choice(backward(check_ours, epilogue, s.m)).kernel.name() + " on " +
               std::to_string(ours.launch_ctas(check_ours)) + " CTAs";
  }
  if (mode == Mode::fused) {
    double fused_worst = 0;
    ok = check_fused(ours, cublaslt, s, operands[0], epilogue, stream, &fused_worst) && ok;
    worst = std::max(worst, fused_worst);
    r.config = ours.choice(fused(check_ours, epilogue)).kernel.name() + " on " +
               std::to_string(ours.launch_ctas(check_ours)) + " CTAs";
  }
  r.max_error_over_limit = worst;
  r.verified = ok;
  if (!ok)
    std::cerr << r.name << ": CHECK FAILED (worst sampled error " << worst << " x its limit, "
              << differ << " elements differ from cuBLASLt)\n";

  const auto time = [&](GemmRunner& runner, DeviceBuffer& d, bool fuse, Mode form,
                        void (*drop)(GemmArgs&) = nullptr) {
    std::vector<GemmArgs> all;
    for (const auto& o : operands) {
      const GemmArgs g = args_for(s, form, o, d.get());
      all.push_back(!fuse                    ? g
                    : form == Mode::backward ? backward(g, epilogue, s.m)
                                             : fused(g, epilogue));
      if (drop) drop(all.back());
    }
    for (int w = 0; w < 5; ++w) runner.run(all[w % sets], stream.get());
    std::vector<double> ms;
    for (int it = 0; it < iters; ++it) {
      Event start, stop;
      start.record(stream.get());
      runner.run(all[it % sets], stream.get());
      stop.record(stream.get());
      stop.synchronize();
      ms.push_back(stop.since(start));
    }
    return median(ms);
  };
  const bool fuse = mode == Mode::fused || mode == Mode::backward;
  r.ours_ms = time(ours, d_ours, fuse, mode);
  r.cublaslt_ms = time(cublaslt, d_lt, mode == Mode::fused, peer_mode);
  if (fuse) r.plain_ms = time(ours, d_ours, false, mode);
  if (mode == Mode::backward) {
    r.no_dbias_ms = time(ours, d_ours, true, mode, [](GemmArgs& g) { g.dbias = 0; });
    r.no_transpose_ms = time(ours, d_ours, true, mode, [](GemmArgs& g) { g.d_t = 0; });
  }
  const double flops = 2.0 * s.m * s.n * s.k;
  r.ours_tflops = flops / (r.ours_ms * 1e-3) / 1e12;
  r.cublaslt_tflops = flops / (r.cublaslt_ms * 1e-3) / 1e12;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 30;
  std::string json, only, table_file;
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--table" && i + 1 < argc) {
      table_file = argv[++i];
    } else if (a == "--mx-row-major") {
      g_mx_row_major = true;
    } else if (a == "--promoted") {
      g_promoted = true;
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--shape" && i + 1 < argc) {
      Shape s{};
      if (std::sscanf(argv[++i], "%ldx%ldx%ld", &s.m, &s.n, &s.k) != 3) {
        std::cerr << "--shape takes MxNxK\n";
        return 2;
      }
      shapes.push_back(s);
    } else {
      std::cerr << "usage: gemm_bench [--iters N] [--json FILE] "
                   "[--only per_tensor|block|fused|backward|mx[,...]] "
                   "[--promoted] [--mx-row-major] [--table FILE] "
                   "[--shape MxNxK]...\n";
      return 2;
    }
  }
  if (shapes.empty())
    shapes = {{8192, 8192, 8192}, {16384, 8192, 8192}, {16384, 28672, 8192}, {16384, 8192, 28672},
              {4096, 4096, 4096}, {2048, 8192, 8192},  {4096, 7168, 16384}};
  try {
    Device device(0);
    const auto cache_dir = std::filesystem::temp_directory_path() / "fp8c-gemm-bench-cache";
    const Jit jit(device.arch(), CubinCache(cache_dir.string()));
    auto generated = make_generated_gemm_runner(jit);
    auto cublaslt = make_cublaslt_runner();
    std::vector<Result> results;
    GemmTable table;  // --table: what gemm = auto picks by
    table.gpu = device.name();
    bool all_ok = true;
    for (Mode mode : {Mode::per_tensor, Mode::block, Mode::fused, Mode::backward, Mode::mx}) {
      const char* key = mode == Mode::per_tensor ? "per_tensor"
                        : mode == Mode::block    ? "block"
                        : mode == Mode::mx       ? "mx"
                        : mode == Mode::backward ? "backward"
                                                 : "fused";
      if (!only.empty() &&
          ("," + only + ",").find("," + std::string(key) + ",") == std::string::npos)
        continue;
      for (const Shape& s : shapes) {
        Result r = run_case(*generated, *cublaslt, s, mode, iters);
        all_ok = all_ok && r.verified;
        std::printf("%-36s %-54s ours %8.3f ms %7.1f TFLOP/s | cuBLASLt %8.3f ms %7.1f | %.3fx%s\n",
                    r.name.c_str(), r.config.c_str(), r.ours_ms, r.ours_tflops, r.cublaslt_ms,
                    r.cublaslt_tflops, r.cublaslt_ms / r.ours_ms, r.verified ? "" : "  UNVERIFIED");
        if (mode == Mode::fused || mode == Mode::backward)
          std::printf("%-36s plain bf16 D %8.3f ms: fused runs at %.3fx of plain\n", "", r.plain_ms,
                      r.plain_ms / r.ours_ms);
        if (mode == Mode::backward)
          std::printf("%-36s without dbias %8.3f ms, without D^T %8.3f ms\n", "", r.no_dbias_ms,
                      r.no_transpose_ms);
        std::fflush(stdout);
        // The forms a layer runs (gemm_table.hpp): per-tensor GEMMs promote there.
        if (r.verified && ((mode == Mode::per_tensor && g_promoted) || mode == Mode::block))
          table.entries.push_back(
              {mode == Mode::block ? GemmForm::block_1x128_128x128 : GemmForm::per_tensor,
               static_cast<std::uint64_t>(s.m), static_cast<std::uint64_t>(s.n),
               static_cast<std::uint64_t>(s.k), r.ours_ms, r.cublaslt_ms});
        results.push_back(r);
      }
    }
    if (!json.empty()) {
      std::ofstream out(json);
      out << "{\n  \"gpu\": \"" << device.name() << "\",\n  \"iters\": " << iters
          << ",\n  \"cases\": [\n";
      for (std::size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        out << "    {\"name\": \"" << r.name << "\", \"m\": " << r.shape.m
            << ", \"n\": " << r.shape.n << ", \"k\": " << r.shape.k << ", \"config\": \""
            << r.config << "\", \"ours_ms\": " << r.ours_ms
            << ", \"ours_tflops\": " << r.ours_tflops << ", \"peer\": \""
            << (r.name.rfind("mxfp8", 0) == 0
                    ? "cublaslt 1x128 x 128x128 block-scaled on the same bytes (no MXFP8 on sm_90)"
                : r.name.rfind("backward", 0) == 0
                    ? "cublaslt plain per-tensor GEMM, bf16 D (no FP8 backward epilogue)"
                    : "cublaslt (fp8c runner, heuristic first)")
            << "\", \"peer_ms\": " << r.cublaslt_ms << ", \"peer_tflops\": " << r.cublaslt_tflops
            << ", \"ratio\": " << r.cublaslt_ms / r.ours_ms;
        if (r.plain_ms > 0)
          out << ", \"plain_generated_ms\": " << r.plain_ms
              << ", \"fused_over_plain\": " << r.plain_ms / r.ours_ms;
        if (r.no_dbias_ms > 0)
          out << ", \"without_dbias_ms\": " << r.no_dbias_ms
              << ", \"without_transpose_ms\": " << r.no_transpose_ms;
        out << ", \"max_sampled_error_over_limit\": " << r.max_error_over_limit
            << ", \"verified\": " << (r.verified ? "true" : "false") << "}"
            << (i + 1 < results.size() ? "," : "") << "\n";
      }
      out << "  ]\n}\n";
    }
    if (!table_file.empty()) {
      std::ofstream out(table_file);
      out << format_gemm_table(table);
      if (!out) throw std::runtime_error("cannot write " + table_file);
      std::printf("%zu measurements written to %s\n", table.entries.size(), table_file.c_str());
    }
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "gemm_bench: " << e.what() << "\n";
    return 1;
  }
}
