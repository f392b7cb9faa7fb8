#include "runtime/cpu/verify_bounds.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "runtime/cpu/gemm.hpp"

namespace fp8c::cpu {
namespace {

std::string at_index(std::size_t i, std::size_t n) {
  return "element " + std::to_string(i) + " of " + std::to_string(n);
}

std::string number(double v) {
  std::ostringstream o;
  o.precision(6);
  o << v;
  return o.str();
}

// A comparison of tensors that do not even have the same size fails, saying so.
bool sizes_differ(CheckResult& c, std::size_t got, std::size_t want) {
  if (got == want) return false;
  c.max_abs = c.rel = INFINITY;
  c.pass = false;
  c.why = "sizes differ: " + std::to_string(got) + " vs " + std::to_string(want) + " elements";
  return true;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0;
}

}  // namespace

double unit_roundoff(ElemType type) {
  switch (type) {
    case ElemType::bf16:
      return 0x1p-8;
    case ElemType::fp16:
      return 0x1p-11;
    case ElemType::fp32:
      return 0x1p-24;
    case ElemType::e4m3:
      return 0x1p-4;
    case ElemType::e5m2:
      return 0x1p-3;
    case ElemType::e8m0:
      return 0.5;
    case ElemType::fp64:
      return 0x1p-53;
    case ElemType::i32:
    case ElemType::u8:
      break;
  }
  throw std::invalid_argument("unit_roundoff: " + std::string(to_string(type)) +
                              " is not a floating-point type");
}

double fp8_subnormal_half_step(ElemType type) {
  return require_fp8(type, "fp8_subnormal_half_step") == ElemType::e5m2 ? 0x1p-17 : 0x1p-10;
}

double activation_lipschitz(Activation a) {
  switch (a) {
    case Activation::gelu:
      return 1.13;  // max of the tanh-GELU derivative, 1.1289 at z = 1.55
    case Activation::silu:
      return 1.1;  // max of the SiLU derivative, 1.0998 at z = 2.40
    default:
      return 1.0;
  }
}

double gamma_fp32(std::uint64_t n) {
  const double nu = double(n) * 0x1p-24;
  return nu / (1.0 - nu);
}

OutputOrigin trace_output(const LayerPlan& plan, int tensor) {
  OutputOrigin o;
  int t = tensor;
  // Up through an epilogue step, then a sum over the group, to what made it.
  const Step* s = plan.producer(t);
  const EpilogueStep* step = s ? s->as<EpilogueStep>() : nullptr;
  if (step) {
    t = step->in;
    s = plan.producer(t);
  }
  if (s && (s->kind() == StepKind::reduce_scatter || s->kind() == StepKind::all_reduce)) {
    o.summed_partial = s->inputs().at(0);
    s = plan.producer(o.summed_partial);
    if (step) {
      o.epilogue = &step->epilogue;
      o.after_sum = true;
    }
  }
  if (const auto* g = s ? s->as<GemmStep>() : nullptr) {
    o.gemm = g;
    if (!o.after_sum && o.summed_partial == kNoTensor) o.epilogue = &g->epilogue;
  } else if (s && (s->kind() == StepKind::quantize || s->kind() == StepKind::grad_epilogue)) {
    o.column_sum = true;
  }
  if (o.epilogue) o.pre_activation = o.epilogue->pre_activation == tensor;
  return o;
}

std::vector<double> abs_products(const LayerPlan& plan, const GemmStep& g,
                                 const std::vector<float>& a, const std::vector<float>& b) {
  // Each operand as [rows][K]: K is dim 1 of both for fprop, dim 1 of dY and
  // dim 0 of W for dgrad, dim 0 of both for wgrad.
  const int ka = g.role == GemmRole::wgrad ? 0 : 1;
  const int kb = g.role == GemmRole::fprop ? 1 : 0;
  const Tensor& ta = plan.tensor(g.a);
  const Tensor& tb = plan.tensor(g.b);
  const std::size_t a0 = ta.dims[0].local, a1 = ta.dims[1].local;
  const std::size_t b0 = tb.dims[0].local, b1 = tb.dims[1].local;
  const std::size_t m = ka == 1 ? a0 : a1, k = ka == 1 ? a1 : a0;
  const std::size_t n = kb == 1 ? b0 : b1;
  if (a.size() != a0 * a1 || b.size() != b0 * b1) return {};
  std::vector<float> am(m * k), bm(n * k);
  for (std::size_t i = 0; i < a0; ++i)
    for (std::size_t j = 0; j < a1; ++j)
      (ka == 1 ? am[i * k + j] : am[j * k + i]) = std::fabs(a[i * a1 + j]);
  for (std::size_t i = 0; i < b0; ++i)
    for (std::size_t j = 0; j < b1; ++j)
      (kb == 1 ? bm[i * k + j] : bm[j * k + i]) = std::fabs(b[i * b1 + j]);
  // The executor's blocked fp32 GEMM: a sum of non-negative terms in fp32 is
  // within gamma_K of the exact one, so scaling by 1 + 2 gamma_K keeps it an
  // upper bound (and the products' own roundings, 2^-24 each, inside it).
  std::vector<float> c(m * n);
  gemm_nt(m, n, k, am, bm, c);
  const double up = 1 + 2 * gamma_fp32(k + 2);
  std::vector<double> s(m * n);
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = double(c[i]) * up;
  return s;
}

std::vector<double> store_bound(const OutputOrigin& o, ElemType stored,
                                const DifferenceBeforeStore& d, const std::vector<float>& a,
                                const std::vector<float>& b, double fp8_scale_inv,
                                double act_error) {
  const double u32 = unit_roundoff(ElemType::fp32);
  const std::size_t n = d.before_store.size();
  std::vector<double> bound(n);
  const bool fp8 = is_fp8(stored);
  // One rounding per side at the store: to the stored type, or for an FP8
  // output to its format (plus the absolute subnormal step, scaled back).
  const double us = unit_roundoff(stored);
  const bool bias = o.epilogue && o.epilogue->bias != kNoTensor;
  const Activation act =
      o.epilogue && !o.pre_activation ? o.epilogue->activation : Activation::none;
  for (std::size_t i = 0; i < n; ++i) {
    const double va = i < a.size() ? std::fabs(double(a[i])) : 0.0;
    const double vb = i < b.size() ? std::fabs(double(b[i])) : 0.0;
    const double m = i < d.magnitude.size() ? d.magnitude[i] : 0.0;
    double diff = d.before_store[i];
    // The bias is added in fp32 (one rounding each side).
    if (bias) diff += 2 * u32 * (m + va + vb);
    if (act != Activation::none) {
      // |act(p) - act(q)| <= L |p - q|; act evaluated in fp32 on both sides,
      // or differently by `act_error` (relative to the pre-activation, whose
      // magnitude |act| bounds from below only near 0: m + |value| covers it).
      diff *= activation_lipschitz(act);
      diff += (8 * u32 + act_error) * (m + va + vb);
    }
    diff += us * (va + vb);
    if (fp8) diff += 2 * fp8_subnormal_half_step(stored) * fp8_scale_inv;
    bound[i] = diff * (1 + 1e-6);  // second-order terms
  }
  return bound;
}

CheckResult compare_bitwise(const std::string& layer, const std::string& check,
                            const std::vector<float>& got, const std::vector<float>& want) {
  CheckResult c;
  c.layer = layer;
  c.check = check;
  c.bitwise = true;
  if (sizes_differ(c, got.size(), want.size())) return c;
  double diff = 0, norm = 0;
  std::size_t differing = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = double(got[i]) - double(want[i]);
    if (!same_bits(got[i], want[i]) && !(std::isnan(got[i]) && std::isnan(want[i]))) {
      if (differing++ == 0) first = i;
      c.max_abs = std::max(c.max_abs, std::isnan(e) ? INFINITY : std::fabs(e));
      if (!std::isnan(e)) diff += e * e;
    }
    if (!std::isnan(want[i])) norm += double(want[i]) * double(want[i]);
  }
  c.rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  c.pass = differing == 0;
  if (!c.pass)
    c.why = std::to_string(differing) + " of " + std::to_string(got.size()) +
            " elements differ; first: " + at_index(first, got.size()) + " is " +
            number(got[first]) + ", expected " + number(want[first]);
  return c;
}

CheckResult compare_within(const std::string& layer, const std::string& check,
                           const std::vector<float>& got, const std::vector<float>& want,
                           const std::vector<double>& bound) {
  CheckResult c;
  c.layer = layer;
  c.check = check;
  c.elementwise = true;
  if (sizes_differ(c, got.size(), want.size()) || sizes_differ(c, bound.size(), want.size()))
    return c;
  double diff = 0, norm = 0, bnorm = 0, worst = 0;
  std::size_t over = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool nan_got = std::isnan(got[i]), nan_want = std::isnan(want[i]);
    const double e = double(got[i]) - double(want[i]);
    bool ok;
    if (nan_got || nan_want)
      ok = nan_got && nan_want;  // NaN by class, not payload
    else
      ok = std::fabs(e) <= bound[i] || same_bits(got[i], want[i]);
    if (!nan_got && !nan_want) {
      c.max_abs = std::max(c.max_abs, std::fabs(e));
      diff += e * e;
      norm += double(want[i]) * double(want[i]);
      bnorm += bound[i] * bound[i];
      if (bound[i] > 0) worst = std::max(worst, std::fabs(e) / bound[i]);
    }
    if (!ok && over++ == 0) first = i;
  }
  c.rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  c.tolerance = norm > 0 ? std::sqrt(bnorm / norm) : std::sqrt(bnorm);
  c.pass = over == 0;
  if (!c.pass)
    c.why = std::to_string(over) + " of " + std::to_string(got.size()) +
            " elements outside their bound; first: " + at_index(first, got.size()) + " is " +
            number(got[first]) + ", expected " + number(want[first]) + " within " +
            number(bound[first]);
  return c;
}

CheckResult compare_relative(const std::string& layer, const std::string& check,
                             const std::vector<float>& got, const std::vector<double>& want,
                             double tolerance) {
  CheckResult c;
  c.layer = layer;
  c.check = check;
  c.tolerance = tolerance;
  if (sizes_differ(c, got.size(), want.size())) return c;
  double diff = 0, norm = 0;
  std::size_t nans = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = double(got[i]) - want[i];
    if (std::isnan(e)) {
      ++nans;
      continue;
    }
    c.max_abs = std::max(c.max_abs, std::fabs(e));
    diff += e * e;
    norm += want[i] * want[i];
  }
  c.rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  if (nans) c.rel = c.max_abs = INFINITY;
  c.pass = c.rel <= tolerance;
  if (nans)
    c.why = std::to_string(nans) + " NaN elements";
  else if (!c.pass)
    c.why = "relative error " + number(c.rel) + " exceeds the bound " + number(tolerance);
  return c;
}

}  // namespace fp8c::cpu
