// The distributed oracle (docs/verify.md). For each layer: its N-rank plan
// and a one-rank plan on the same block grid run on the same data; the
// one-rank backward takes the N-rank run's pre-activation, so the two runs
// read identical quantized operands everywhere and differ only where the
// N-rank plan sums partial results over the group. Every output is then
// compared bit for bit, or element by element within a bound derived from
// those sums (verify_bounds.hpp); and each run against float64 within a
// bound derived from the formats on its path.
#include "runtime/cpu/verify.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "codegen/plan/planner.hpp"
#include "runtime/cpu/activation.hpp"
#include "runtime/cpu/quantize.hpp"
#include "runtime/cpu/reference.hpp"
#include "runtime/cpu/verify_bounds.hpp"

namespace fp8c::cpu {

Assembled assemble_shards(const std::vector<const std::vector<float>*>& values,
                          const std::vector<std::array<Dim, 2>>& dims) {
  Assembled a;
  const std::uint64_t g0 = dims.at(0)[0].global, g1 = dims.at(0)[1].global;
  a.values.assign(g0 * g1, 0.0f);
  std::vector<bool> seen(g0 * g1, false);
  for (std::size_t r = 0; r < values.size(); ++r) {
    const auto& v = *values[r];
    const auto& d = dims[r];
    const std::uint64_t r0 = d[0].sharded() ? r * d[0].local : 0;
    const std::uint64_t c0 = d[1].sharded() ? r * d[1].local : 0;
    if (v.size() != d[0].local * d[1].local) {
      a.values.clear();  // a rank without this tensor: a size mismatch for the caller
      return a;
    }
    for (std::uint64_t i = 0; i < d[0].local; ++i)
      for (std::uint64_t j = 0; j < d[1].local; ++j) {
        const std::size_t at = (r0 + i) * g1 + c0 + j;
        const float x = v[i * d[1].local + j];
        if (seen[at] && std::memcmp(&a.values[at], &x, 4) != 0) a.replicas_agree = false;
        a.values[at] = x;
        seen[at] = true;
      }
  }
  return a;
}

Assembled assemble(const std::vector<const RankStepResult*>& ranks,
                   std::vector<float> RankStepResult::*field,
                   std::array<Dim, 2> RankStepResult::*dims_field) {
  std::vector<const std::vector<float>*> values;
  std::vector<std::array<Dim, 2>> dims;
  for (const auto* r : ranks) {
    values.push_back(&(r->*field));
    dims.push_back(r->*dims_field);
  }
  return assemble_shards(values, dims);
}

namespace {

std::string fmt_ranks(std::uint32_t n) {
  return std::to_string(n) + (n == 1 ? " rank" : " ranks");
}

// The GEMM of `role` in a plan, or null.
const GemmStep* gemm_of(const LayerPlan& plan, GemmRole role) {
  for (const auto* pass : {&plan.forward, &plan.backward})
    for (const auto& s : *pass)
      if (const auto* g = s.as<GemmStep>(); g && g->role == role) return g;
  return nullptr;
}

// A GEMM's error relative to sum |a||b| from its operands: each quantized
// value is within u of its format of the value it stands for; the RMS
// relative error of such a rounding is at most u / sqrt(3), and of a
// product of two independently rounded operands sqrt(ua^2 + ub^2) /
// sqrt(3). The bound takes sqrt(ua^2 + ub^2) (a sqrt(3) margin); none in
// high precision.
double operand_error(const LayerPlan& plan, const GemmStep& g) {
  if (g.high_precision) return 0.0;
  const double ua = unit_roundoff(plan.tensor(g.a).type);
  const double ub = unit_roundoff(plan.tensor(g.b).type);
  return std::sqrt(ua * ua + ub * ub);
}

// fp32 accumulation over K: independent roundings grow as sqrt(K) u32 (2x).
double accumulation_error(std::uint64_t k) {
  return 2 * std::sqrt(double(std::max<std::uint64_t>(k, 1))) * unit_roundoff(ElemType::fp32);
}

// The K extent of a GEMM (global: the one-rank plan's).
std::uint64_t k_extent(const Layer& layer, GemmRole role, std::uint64_t tokens) {
  return role == GemmRole::fprop ? layer.in : role == GemmRole::dgrad ? layer.out : tokens;
}

// One layer output and where it lives in the results and the plan.
struct Field {
  const char* name;
  std::vector<float> RankStepResult::*values;
  std::array<Dim, 2> RankStepResult::*dims;
  int LayerIo::*io;
  std::vector<double> ReferenceResult::*ref;
  GemmRole role;  // the GEMM it comes from (db: none, role unused)
};

std::vector<Field> fields_of(const Layer& layer, const LayerPlan& plan) {
  std::vector<Field> f = {{"y", &RankStepResult::y, &RankStepResult::y_dims,
                           plan.io.y != kNoTensor ? &LayerIo::y : &LayerIo::y_fp8,
                           &ReferenceResult::y, GemmRole::fprop}};
  if (plan.io.z != kNoTensor)
    f.push_back({"z", &RankStepResult::z, &RankStepResult::z_dims, &LayerIo::z, &ReferenceResult::z,
                 GemmRole::fprop});
  f.push_back({"dx", &RankStepResult::dx, &RankStepResult::dx_dims, &LayerIo::dx,
               &ReferenceResult::dx, GemmRole::dgrad});
  f.push_back({"dw", &RankStepResult::dw, &RankStepResult::dw_dims, &LayerIo::dw,
               &ReferenceResult::dw, GemmRole::wgrad});
  if (layer.bias)
    f.push_back({"db", &RankStepResult::db, &RankStepResult::db_dims, &LayerIo::db,
                 &ReferenceResult::db, GemmRole::fprop});
  return f;
}

// What the runs must capture for the bounds: the N-rank partials every sum
// over the group reads, and the one-rank operands of the GEMMs they come from.
void add_captures(const Layer& layer, const LayerPlan& pn, const LayerPlan& p1,
                  std::vector<std::string>& capture_n, std::vector<std::string>& capture_1) {
  for (const Field& f : fields_of(layer, pn)) {
    const OutputOrigin o = trace_output(pn, pn.io.*f.io);
    if (o.summed_partial == kNoTensor) continue;
    capture_n.push_back(pn.tensor(o.summed_partial).name);
    if (!o.gemm) continue;
    if (const GemmStep* g1 = gemm_of(p1, o.gemm->role)) {
      capture_1.push_back(p1.tensor(g1->a).name);
      capture_1.push_back(p1.tensor(g1->b).name);
    }
  }
  if (p1.io.y_scale != kNoTensor) capture_1.push_back(p1.tensor(p1.io.y_scale).name);
  // The producer's z a handed dz's act' read (handed_dz_reference).
  if (p1.io.dx_dact_input != kNoTensor) capture_1.push_back(p1.tensor(p1.io.dx_dact_input).name);
}

// The bound between the N-rank and one-rank values of a summed output:
// the sum's own roundings and both runs' fp32 accumulations before the
// store, then the store (verify_bounds.hpp).
std::vector<double> summed_bound(const Layer& layer, const LayerPlan& pn, const LayerPlan& p1,
                                 const OutputOrigin& o, const Field& f,
                                 const std::vector<const RankStepResult*>& ranks_n,
                                 const RankStepResult& one, const LayerData& data,
                                 std::uint64_t tokens, const std::vector<float>& vn,
                                 const std::vector<float>& v1) {
  const std::size_t n = v1.size();
  const std::uint32_t R = pn.ranks;
  const double ud = unit_roundoff(pn.tensor(o.summed_partial).type);
  DifferenceBeforeStore d;
  d.before_store.assign(n, 0.0);
  d.magnitude.assign(n, 0.0);
  // sum_r |p_r|: every rank's partial covers the whole output.
  const std::string partial = pn.tensor(o.summed_partial).name;
  for (const auto* r : ranks_n) {
    auto it = r->captured.find(partial);
    if (it == r->captured.end() || it->second.logical.size() != n) return {};
    for (std::size_t i = 0; i < n; ++i) d.magnitude[i] += std::fabs(double(it->second.logical[i]));
  }
  // sum_k |a_k b_k| of the GEMM (or |dz| <= L |dy| of a column sum).
  std::vector<double> s(n, 0.0);
  std::uint64_t k = tokens;
  if (o.gemm) {
    const GemmStep* g1 = gemm_of(p1, o.gemm->role);
    if (!g1) return {};
    auto a = one.captured.find(p1.tensor(g1->a).name);
    auto b = one.captured.find(p1.tensor(g1->b).name);
    if (a == one.captured.end() || b == one.captured.end()) return {};
    s = abs_products(p1, *g1, a->second.logical, b->second.logical);
    k = k_extent(layer, o.gemm->role, tokens);
  } else if (o.column_sum) {
    const double lip = activation_lipschitz(layer.activation);
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t j = 0; j < n; ++j) s[j] += lip * std::fabs(double(data.dy[t * n + j]));
  }
  if (s.size() != n) return {};
  // The sum over the group (collectives/reduce.hpp: partials stored in the
  // layer dtype, widened, summed in fp32 in rank order, rounded once): each
  // partial's rounding (u_d |p_r|), the fp32 running sums ((R - 1) u32 sum
  // |p_r|), the sum's own rounding where an epilogue step reads it (else it
  // is the store, which store_bound adds); both runs' fp32 GEMM
  // accumulations over K (gamma_K sum |a b| each).
  const double u32 = unit_roundoff(ElemType::fp32);
  const double sum_rounding = ud * (o.after_sum ? 2 : 1) + (R - 1.0) * u32;
  for (std::size_t i = 0; i < n; ++i)
    d.before_store[i] = sum_rounding * d.magnitude[i] * (1 + ud) + 2 * gamma_fp32(k) * s[i];
  const Tensor& stored = pn.tensor(pn.io.*f.io);
  double scale_inv = 1.0;
  if (p1.io.y_scale != kNoTensor)
    if (auto it = one.captured.find(p1.tensor(p1.io.y_scale).name);
        it != one.captured.end() && !it->second.logical.empty() && it->second.logical[0] != 0)
      scale_inv = 1.0 / std::fabs(double(it->second.logical[0]));
  return store_bound(o, stored.type, d, vn, v1, scale_inv);
}

std::vector<float> float_bytes(const std::vector<std::uint8_t>& b) {
  return std::vector<float>(b.begin(), b.end());
}

// Delayed scales and histories, key by key: a key on one side only, or any
// bit of a scale or history entry, is a difference.
CheckResult compare_state(const std::string& layer, const std::string& check, const LayerState& a,
                          const LayerState& b) {
  CheckResult c;
  c.layer = layer;
  c.check = check;
  c.bitwise = true;
  c.pass = true;
  const auto mismatch = [&](const std::string& why) {
    if (c.pass) c.why = why;
    c.pass = false;
    c.max_abs = INFINITY;
  };
  for (const auto& [key, v] : a.delayed) {
    auto it = b.delayed.find(key);
    if (it == b.delayed.end()) {
      mismatch("'" + key + "' has delayed state on one side only");
      continue;
    }
    std::vector<float> x{v.scale}, y{it->second.scale};
    x.insert(x.end(), v.history.begin(), v.history.end());
    y.insert(y.end(), it->second.history.begin(), it->second.history.end());
    const CheckResult d = compare_bitwise(layer, check, x, y);
    if (!d.pass) mismatch("'" + key + "': " + d.why + " (element 0 is the scale)");
  }
  for (const auto& [key, v] : b.delayed)
    if (!a.delayed.count(key)) mismatch("'" + key + "' has delayed state on one side only");
  return c;
}

// Keeps, per check name, the worst result over the steps (a FAIL's reason
// from its first failing step).
class Rows {
 public:
  explicit Rows(VerifyReport& report) : report_(report) {}
  void add(CheckResult c) {
    for (auto& r : rows_)
      if (r.layer == c.layer && r.check == c.check) {
        r.max_abs = std::max(r.max_abs, c.max_abs);
        r.rel = std::max(r.rel, c.rel);
        r.tolerance = std::max(r.tolerance, c.tolerance);
        if (r.pass && !c.pass) r.why = c.why;
        r.pass = r.pass && c.pass;
        return;
      }
    rows_.push_back(std::move(c));
  }
  ~Rows() { report_.checks.insert(report_.checks.end(), rows_.begin(), rows_.end()); }

 private:
  VerifyReport& report_;
  std::vector<CheckResult> rows_;
};

// One layer's runs, for one step: N ranks (empty when the layer runs on one
// rank), the one-rank run, and the inputs this layer saw (x, dy handed over
// in a chain).
struct StepRuns {
  std::vector<const RankStepResult*> n;
  const RankStepResult* one = nullptr;
  LayerData data;
};

// `upstream`: a producer's gradient bound grows by this (relative) where its
// dz came from its consumer's FP8 dgrad (verify_chains).
void compare_step(const Layer& layer, const LayerPlan& pn, const LayerPlan& p1,
                  std::uint64_t tokens, const StepRuns& s, const std::string& label, Rows& rows,
                  double upstream = 0.0) {
  const bool multi = pn.ranks > 1;
  const std::string rn = fmt_ranks(pn.ranks);
  const std::vector<const RankStepResult*> one = {s.one};
  // float64, backward given each run's own pre-activation.
  const auto reference = [&](const std::vector<float>& z) {
    return reference_layer_step(layer, tokens, s.data, z.empty() ? nullptr : &z);
  };
  const Assembled z_n =
      multi ? assemble(s.n, &RankStepResult::z, &RankStepResult::z_dims) : Assembled{};
  // The one-rank backward ran from the N-rank pre-activation (replaced), so
  // one float64 reference serves both runs (it is the costliest part of a
  // step's comparison, and a [out][in] float64 dw is 8 bytes per weight).
  ReferenceResult ref_1 = reference(multi ? z_n.values : s.one->z);
  const double dz_factor = handed_dz_reference(p1, *s.one, ref_1.dx);
  const ReferenceResult& ref_n = ref_1;
  const auto norm = [](const std::vector<double>& v) {
    double n = 0;
    for (double x : v) n += x * x;
    return std::sqrt(n);
  };
  const double z_over_y =
      ref_1.z.empty() || norm(ref_1.y) == 0 ? 1.0 : norm(ref_1.z) / norm(ref_1.y);
  bool replicas = true;
  for (const Field& f : fields_of(layer, pn)) {
    const Assembled a1 = assemble(one, f.values, f.dims);
    const std::string fn = f.name;
    const bool gradient = fn == "dx" || fn == "dw" || fn == "db";
    const double factor = fn == "dx" ? dz_factor : 1.0;
    const double extra = gradient ? upstream : 0.0;
    const double bound = factor * float64_bound(layer, pn, f.name, z_over_y) + extra;
    const double bound_1 = factor * float64_bound(layer, p1, f.name, z_over_y) + extra;
    if (multi) {
      const Assembled an = assemble(s.n, f.values, f.dims);
      replicas = replicas && an.replicas_agree;
      const std::string check = std::string(f.name) + ": " + rn + " vs 1 rank" + label;
      const OutputOrigin o = trace_output(pn, pn.io.*f.io);
      if (o.summed_partial == kNoTensor) {
        rows.add(compare_bitwise(layer.name, check, an.values, a1.values));
      } else {
        std::vector<double> b =
            summed_bound(layer, pn, p1, o, f, s.n, *s.one, s.data, tokens, an.values, a1.values);
        CheckResult c = compare_within(layer.name, check, an.values, a1.values, b);
        if (b.empty()) c.why = "the bound's inputs were not captured", c.pass = false;
        rows.add(c);
      }
      rows.add(compare_relative(layer.name, std::string(f.name) + ": " + rn + " vs float64" + label,
                                an.values, ref_n.*f.ref, bound));
    }
    rows.add(compare_relative(
        layer.name,
        std::string(f.name) + ": " + (multi ? "1 rank vs float64" : "vs float64") + label,
        a1.values, ref_1.*f.ref, bound_1));
  }
  if (!multi) return;
  CheckResult rep;
  rep.layer = layer.name;
  rep.check = "replicated outputs identical on all ranks" + label;
  rep.bitwise = true;
  rep.pass = replicas;
  if (!replicas) rep.why = "a tensor every rank holds whole differs between ranks";
  rows.add(rep);
  if (layer.recipe.kind == RecipeKind::delayed) {
    for (const auto* r : s.n)
      rows.add(compare_state(layer.name, "delayed scales/histories identical on all ranks" + label,
                             r->state, s.n[0]->state));
    rows.add(compare_state(layer.name, "delayed scales/histories: " + rn + " vs 1 rank" + label,
                           s.n[0]->state, s.one->state));
  }
}

// The plans of a layer: at N ranks, and at one rank on the N-rank block grid.
struct LayerPlans {
  LayerPlan n, one;
};

LayerPlans plans_of(const Plan& plan_n, const Plan& plan_1, const std::string& layer) {
  return {*plan_n.find(layer), *plan_1.find(layer)};
}

// The one-rank run's replacements for step s: the N-rank pre-activation.
std::vector<Replacement> z_replacement(const LayerPlan& p1,
                                       const std::vector<const RankStepResult*>& n) {
  if (p1.io.z == kNoTensor || n.empty()) return {};
  Replacement r;
  r.when = Replacement::When::before_backward;
  r.tensor = p1.io.z;
  r.values = assemble(n, &RankStepResult::z, &RankStepResult::z_dims).values;
  return {r};
}

std::vector<const RankStepResult*> step_of(const std::vector<std::vector<RankStepResult>>& runs,
                                           std::size_t s) {
  std::vector<const RankStepResult*> v;
  for (const auto& r : runs) v.push_back(&r.at(s));
  return v;
}

// dx *= act'(z) in place (z: the pre-activation dz's act' reads, as many
// elements, or none without an activation); returns the factor a bound on
// dx's relative error grows by in dz: |act'| <= L scales each element's
// error, relative to ||dz|| instead of ||dx|| (measured here, at least 1).
double apply_dact(Activation dact, const std::vector<float>& z, std::vector<double>& dx) {
  if (dact == Activation::none) return 1.0;
  double before = 0, after = 0;
  for (std::size_t i = 0; i < dx.size(); ++i) {
    before += dx[i] * dx[i];
    dx[i] *= activation_grad(dact, double(z.at(i)));
    after += dx[i] * dx[i];
  }
  const double ratio = after > 0 ? std::sqrt(before / after) : 1.0;
  return std::max(1.0, activation_lipschitz(dact) * ratio);
}

// The relative error a producer's float64 gradients take on where its dz
// came from its consumer's FP8 dgrad (chain_hands_dz): that GEMM's operand
// roundings and fp32 accumulation (float64_bound's terms), carried into dz
// by act' (at most L), relative to ||dz|| instead of ||dx|| (measured).
double handed_gradient_bound(const Layer& producer, const LayerPlan& consumer,
                             const std::vector<double>& dx, const std::vector<float>& z) {
  const GemmStep* g = gemm_of(consumer, GemmRole::dgrad);
  if (!g) return 0.0;
  const double gemm =
      operand_error(consumer, *g) + accumulation_error(consumer.tensor(g->a).dims[1].global);
  std::vector<double> dz = dx;
  return apply_dact(producer.activation, z, dz) * gemm;
}

// Producer -> consumer pairs end to end: on each rank the consumer reads the
// producer's output as it is, the producer's gradient is the consumer's dX.
// The one-rank chain takes the N-rank chain's handed-over tensors (and
// pre-activations), so each layer compares as it does alone.
void verify_chains(const Spec& spec, const Plan& plan_n, const Plan& plan_1,
                   const VerifyOptions& options, VerifyReport& report) {
  for (std::size_t li = 0; li < spec.layers.size(); ++li) {
    const Layer& second = spec.layers[li];
    const Layer* first = second.input.empty() ? nullptr : spec.find_layer(second.input);
    if (!first) continue;
    if (!options.layer.empty() && options.layer != first->name && options.layer != second.name)
      continue;
    const std::string name = first->name + "->" + second.name;
    // Both layers' N-rank and 1-rank buffers live at once: about 40-50 bytes
    // per weight (gpt_mlp: 22 GB at 64 tokens, 2 steps).
    if (first->in * first->out + second.in * second.out > (1ull << 27) && !options.force) {
      report.notes.push_back("chain " + name +
                             " not run: its layers hold more than 2^27 weights (several GB "
                             "on CPU); pass --force to run it");
      continue;
    }
    std::vector<ChainData> data;
    for (std::uint32_t s = 0; s < options.steps; ++s) {
      const std::uint64_t seed = options.seed * 1000003 + li * 7919 + s + 500009;
      data.push_back({random_layer_data(*first, options.tokens, seed),
                      random_layer_data(second, options.tokens, seed + 1)});
    }
    const LayerPlans a = plans_of(plan_n, plan_1, first->name);
    const LayerPlans b = plans_of(plan_n, plan_1, second.name);
    const bool multi = a.n.ranks > 1;
    ExecutorOptions en = options.executor, e1 = options.executor;
    e1.skip_collective_on_rank = -1;
    add_captures(*first, a.n, a.one, en.capture, e1.capture);
    add_captures(second, b.n, b.one, en.capture, e1.capture);
    const int y_out = a.n.io.y != kNoTensor ? a.n.io.y : a.n.io.y_fp8;
    en.capture.push_back(a.n.tensor(y_out).name);
    if (a.n.io.y_amax != kNoTensor) en.capture.push_back(a.n.tensor(a.n.io.y_amax).name);
    std::vector<std::vector<ChainStepResult>> run_n;
    try {
      if (multi) run_n = run_chain(*first, a.n, second, b.n, data, en);
    } catch (const ExecutorError& e) {
      report.notes.push_back("chain " + name + " not run: " + e.what());
      continue;
    }
    // The one-rank chain's replacements, step by step.
    std::vector<ChainReplacements> replace(options.steps);
    for (std::size_t s = 0; multi && s < options.steps; ++s) {
      std::vector<const RankStepResult*> rn_a, rn_b;
      for (const auto& r : run_n) {
        rn_a.push_back(&r[s].first);
        rn_b.push_back(&r[s].second);
      }
      replace[s].first = z_replacement(a.one, rn_a);
      replace[s].second = z_replacement(b.one, rn_b);
      // The consumer's input: the producer's output as the N ranks held it.
      std::vector<const std::vector<float>*> shards;
      std::vector<std::vector<float>> bytes;
      std::vector<std::array<Dim, 2>> dims;
      float amax = 0.0f;
      for (const auto* r : rn_a) {
        const auto& c = r->captured.at(a.n.tensor(y_out).name);
        bytes.push_back(a.n.tensor(y_out).is_fp8() ? float_bytes(c.bytes) : c.logical);
        dims.push_back(a.n.tensor(y_out).dims);
        if (a.n.io.y_amax != kNoTensor)
          amax = std::max(amax, r->captured.at(a.n.tensor(a.n.io.y_amax).name).logical.at(0));
      }
      for (const auto& v : bytes) shards.push_back(&v);
      const Assembled x = assemble_shards(shards, dims);
      Replacement rx;
      rx.when = Replacement::When::before_forward;
      if (b.one.io.x_fp8 != kNoTensor) {
        rx.tensor = b.one.io.x_fp8;
        rx.bytes.assign(x.values.begin(), x.values.end());
        if (b.one.io.x_fp8_col != kNoTensor) {
          // Its columnwise copy, as the one-rank producer's GEMM would have
          // written it beside these bytes.
          const auto& d = b.one.tensor(b.one.io.x_fp8).dims;
          Replacement rc;
          rc.when = Replacement::When::before_forward;
          rc.tensor = b.one.io.x_fp8_col;
          rc.bytes.resize(rx.bytes.size());
          transpose_bytes(rx.bytes, d[0].local, d[1].local, rc.bytes);
          replace[s].second.push_back(rc);
        }
        Replacement ra;
        ra.when = Replacement::When::before_forward;
        ra.tensor = b.one.io.x_amax;
        ra.values = {amax};
        replace[s].second.push_back(ra);
      } else {
        rx.tensor = b.one.io.x;
        rx.values = x.values;
      }
      replace[s].second.push_back(rx);
      if (b.one.io.dx_dact_input != kNoTensor) {
        // The producer's z the consumer's dgrad reads: the N-rank one, as
        // the one-rank producer's own (z_replacement).
        Replacement rz;
        rz.when = Replacement::When::before_backward;
        rz.tensor = b.one.io.dx_dact_input;
        rz.values = assemble(rn_a, &RankStepResult::z, &RankStepResult::z_dims).values;
        replace[s].second.push_back(rz);
      }
      // The producer's dY: the consumer's dX as the N ranks computed it. A
      // handed FP8 dz needs none: the consumer's dgrad sums over the whole
      // K on every rank, so both chains hand the same bytes.
      if (a.one.io.dy_fp8_col == kNoTensor) {
        Replacement rd;
        rd.when = Replacement::When::before_backward;
        rd.tensor = a.one.io.dy;
        rd.values = assemble(rn_b, &RankStepResult::dx, &RankStepResult::dx_dims).values;
        replace[s].first.push_back(rd);
      }
    }
    const auto run_1 = run_chain(*first, a.one, second, b.one, data, e1, replace);
    Rows rows(report);
    for (std::uint32_t s = 0; s < options.steps; ++s) {
      StepRuns ra, rb;
      for (const auto& r : run_n) {
        ra.n.push_back(&r[s].first);
        rb.n.push_back(&r[s].second);
      }
      ra.one = &run_1[0][s].first;
      rb.one = &run_1[0][s].second;
      // What each layer saw: the consumer the producer's output, the
      // producer the consumer's dX, as the N ranks computed them (the
      // one-rank chain took those: the replacements).
      ra.data = data[s].first;
      rb.data = data[s].second;
      if (multi) {
        ra.data.dy = assemble(rb.n, &RankStepResult::dx, &RankStepResult::dx_dims).values;
        rb.data.x = assemble(ra.n, &RankStepResult::y, &RankStepResult::y_dims).values;
      } else {
        ra.data.dy = run_1[0][s].second.dx;
        rb.data.x = run_1[0][s].first.y;
      }
      double upstream = 0.0;
      if (a.one.io.dy_fp8_col != kNoTensor) {
        // The consumer handed FP8 dz (its dact applied): the producer's
        // float64 gradient is that of the consumer's float64 dx, and its
        // bounds carry the consumer's dgrad error (handed_gradient_bound).
        const std::vector<float> z2 =
            multi ? assemble(rb.n, &RankStepResult::z, &RankStepResult::z_dims).values
                  : run_1[0][s].second.z;
        const ReferenceResult r2 =
            reference_layer_step(second, options.tokens, rb.data, z2.empty() ? nullptr : &z2);
        ra.data.dy.assign(r2.dx.begin(), r2.dx.end());
        upstream = handed_gradient_bound(*first, b.one, r2.dx, run_1[0][s].first.z);
      }
      compare_step(*first, a.n, a.one, options.tokens, ra, " [" + name + "]", rows, upstream);
      compare_step(second, b.n, b.one, options.tokens, rb, " [" + name + "]", rows);
    }
  }
}

}  // namespace

// A layer whose dgrad hands its producer FP8 dz (chain_hands_dz): its "dx"
// field holds dz = dx * act'(z), z the producer's pre-activation it read
// (captured). Turns the float64 dx into that dz, and returns the factor the
// dx bound grows by: |act'| <= L multiplies dx's error, relative to ||dz||
// instead of ||dx|| (measured from the float64 reference, >= 1).
double handed_dz_reference(const LayerPlan& plan, const RankStepResult& run,
                           std::vector<double>& dx) {
  const GemmStep* g = gemm_of(plan, GemmRole::dgrad);
  if (!g || plan.io.dx_fp8_col == kNoTensor) return 1.0;
  const Activation dact = g->epilogue.dact;
  if (dact == Activation::none) return 1.0;
  auto it = run.captured.find(plan.tensor(plan.io.dx_dact_input).name);
  if (it == run.captured.end() || it->second.logical.size() != dx.size()) {
    dx.assign(dx.size(), NAN);  // the comparison fails, saying so below
    return 1.0;
  }
  return apply_dact(dact, it->second.logical, dx);
}

double float64_bound(const Layer& layer, const LayerPlan& plan, const std::string& tensor,
                     double z_over_y) {
  const double ud = unit_roundoff(layer.dtype);
  const bool db = tensor == "db";
  const GemmRole role = tensor == "dx"   ? GemmRole::dgrad
                        : tensor == "dw" ? GemmRole::wgrad
                                         : GemmRole::fprop;
  // The GEMM's operands (operand_error), and its fp32 accumulation over K:
  // the GEMM's; a column sum's is the tokens.
  double gemm = 0.0;
  std::uint64_t k = plan.tensor(plan.io.dy).dims[0].global;
  const GemmStep* g = db ? nullptr : gemm_of(plan, role);
  if (g) {
    gemm = operand_error(plan, *g);
    const Tensor& a = plan.tensor(g->a);
    k = a.dims[static_cast<std::size_t>(role == GemmRole::wgrad ? 0 : 1)].global;
  }
  const double accumulation = accumulation_error(k);
  // A sum over the group: 2R - 1 roundings of partials and running sums in
  // the layer dtype, each at most u of the partials' magnitude.
  double sum = 0.0;
  const int LayerIo::*field = tensor == "y"
                                  ? (plan.io.y != kNoTensor ? &LayerIo::y : &LayerIo::y_fp8)
                              : tensor == "z"  ? &LayerIo::z
                              : tensor == "dx" ? &LayerIo::dx
                              : tensor == "dw" ? &LayerIo::dw
                                               : &LayerIo::db;
  const int id = plan.io.*field;
  if (id != kNoTensor && trace_output(plan, id).summed_partial != kNoTensor)
    sum = (2.0 * plan.ranks - 1) * ud;
  // The store: the layer dtype, or an FP8 output's format.
  const double store = id != kNoTensor && plan.tensor(id).is_fp8()
                           ? unit_roundoff(plan.tensor(id).type)
                           : unit_roundoff(id != kNoTensor ? plan.tensor(id).type : layer.dtype);
  if (db) return sum + 2 * ud + accumulation;  // a column sum of dz given z
  const double before_store = gemm + sum + accumulation;
  if (tensor == "z") return before_store + store;
  if (tensor == "y")
    // |act(z') - act(z)| <= L |z' - z|: relative to ||y||, z's error grows
    // by L ||z|| / ||y|| (measured from the float64 reference).
    return activation_lipschitz(layer.activation) *
               (layer.activation == Activation::none ? 1.0 : z_over_y) * before_store +
           store;
  // dx, dw given z: dz is exact in the reference, rounded (to the backward
  // format, or to the layer dtype) in the run.
  return before_store + ud + store;
}

bool VerifyReport::passed() const {
  return std::all_of(checks.begin(), checks.end(), [](const auto& c) { return c.pass; });
}

double layer_step_flops(const Layer& layer, std::uint64_t tokens) {
  return 3.0 * 2.0 * double(tokens) * double(layer.in) * double(layer.out);
}

VerifyReport verify_spec(const Spec& spec, const VerifyOptions& options) {
  if (!options.layer.empty() && !spec.find_layer(options.layer))
    throw VerifyError("no layer '" + options.layer + "'");
  if (options.steps == 0) throw VerifyError("--steps must be at least 1");
  // Refuse before running anything: a layer too large for CPU ranks.
  for (const Layer& layer : spec.layers) {
    if (!options.layer.empty() && layer.name != options.layer) continue;
    const double flops = layer_step_flops(layer, options.tokens);
    if (flops > options.max_flops && !options.force) {
      std::ostringstream m;
      m << "layer '" << layer.name << "': one step is " << std::setprecision(3) << flops
        << " GEMM FLOPs per run (limit " << options.max_flops
        << " without --force); use fewer --tokens or pass --force";
      throw VerifyError(m.str());
    }
  }
  PlanOptions many;
  many.ranks = options.ranks;
  many.tokens = options.tokens;
  const Plan plan_n = plan_spec(spec, many);
  // The one-rank plans, each on its layer's N-rank block grid.
  PlanOptions one;
  one.ranks = 1;
  one.tokens = options.tokens;
  for (const LayerPlan& lp : plan_n.layers) one.block_grid[lp.layer] = lp.ranks;
  const Plan plan_1 = plan_spec(spec, one);
  VerifyReport report;
  for (std::size_t li = 0; li < spec.layers.size(); ++li) {
    const Layer& layer = spec.layers[li];
    if (!options.layer.empty() && layer.name != options.layer) continue;
    LayerPlans plans = plans_of(plan_n, plan_1, layer.name);
    if (options.edit_plan) options.edit_plan(plans.n);
    const bool multi = plans.n.ranks > 1;
    std::vector<LayerData> data;
    for (std::uint32_t s = 0; s < options.steps; ++s)
      data.push_back(
          random_layer_data(layer, options.tokens, options.seed * 1000003 + li * 7919 + s));
    ExecutorOptions en = options.executor, e1 = options.executor;
    e1.skip_plan_check = false;
    e1.skip_collective_on_rank = -1;
    add_captures(layer, plans.n, plans.one, en.capture, e1.capture);
    std::vector<std::vector<RankStepResult>> run_n;
    if (multi) {
      run_n = run_layer(layer, plans.n, data, en);
      for (std::uint32_t s = 0; s < options.steps; ++s)
        e1.replace.push_back(z_replacement(plans.one, step_of(run_n, s)));
    }
    const auto run_1 = run_layer(layer, plans.one, data, e1);
    Rows rows(report);
    for (std::uint32_t s = 0; s < options.steps; ++s) {
      StepRuns r;
      if (multi) r.n = step_of(run_n, s);
      r.one = &run_1[0][s];
      r.data = data[s];
      compare_step(layer, plans.n, plans.one, options.tokens, r, "", rows);
    }
  }
  if (options.chains && !options.edit_plan) verify_chains(spec, plan_n, plan_1, options, report);
  return report;
}

std::string format_report(const VerifyReport& report) {
  std::ostringstream o;
  o << std::left << std::setw(12) << "layer" << std::setw(50) << "check" << std::right
    << std::setw(12) << "max abs" << std::setw(12) << "rel err" << std::setw(12) << "tolerance"
    << "  result\n";
  for (const auto& c : report.checks) {
    o << std::left << std::setw(12) << c.layer << std::setw(50) << c.check << std::right
      << std::setprecision(3) << std::scientific << std::setw(12) << c.max_abs << std::setw(12)
      << c.rel << std::setw(12);
    if (c.bitwise)
      o << "bitwise";
    else
      o << c.tolerance;
    o << std::defaultfloat << "  " << (c.pass ? "pass" : "FAIL");
    if (c.elementwise) o << " (per element)";
    if (!c.pass && !c.why.empty()) o << ": " << c.why;
    o << "\n";
  }
  for (const auto& n : report.notes) o << "note: " << n << "\n";
  return o.str();
}

std::string report_to_json(const VerifyReport& report) {
  std::ostringstream o;
  o << std::setprecision(6) << "{\"passed\": " << (report.passed() ? "true" : "false")
    << ", \"checks\": [";
  bool first = true;
  auto num = [&](double v) {
    if (std::isfinite(v))
      o << v;
    else
      o << "null";
  };
  const auto text = [&](const std::string& s) {
    o << '"';
    for (char ch : s) {
      if (ch == '"' || ch == '\\') o << '\\';
      o << (static_cast<unsigned char>(ch) < 0x20 ? ' ' : ch);
    }
    o << '"';
  };
  for (const auto& c : report.checks) {
    o << (first ? "\n" : ",\n") << "  {\"layer\": ";
    text(c.layer);
    o << ", \"check\": ";
    text(c.check);
    o << ", \"max_abs\": ";
    num(c.max_abs);
    o << ", \"rel\": ";
    num(c.rel);
    o << ", \"tolerance\": ";
    if (c.bitwise)
      o << "\"bitwise\"";
    else
      num(c.tolerance);
    o << ", \"per_element\": " << (c.elementwise ? "true" : "false")
      << ", \"pass\": " << (c.pass ? "true" : "false");
    if (!c.why.empty()) {
      o << ", \"why\": ";
      text(c.why);
    }
    o << "}";
    first = false;
  }
  o << "\n]}\n";
  return o.str();
}

}  // namespace fp8c::cpu
