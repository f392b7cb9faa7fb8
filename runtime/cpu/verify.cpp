#include "runtime/cpu/verify.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "codegen/plan/planner.hpp"
#include "runtime/cpu/reference.hpp"

namespace fp8c::cpu {
namespace {}  // namespace

Assembled assemble(const std::vector<const RankStepResult*>& ranks,
                   std::vector<float> RankStepResult::*field,
                   std::array<Dim, 2> RankStepResult::*dims_field) {
  Assembled a;
  const auto& d0 = ranks[0]->*dims_field;
  const std::uint64_t g0 = d0[0].global, g1 = d0[1].global;
  a.values.assign(g0 * g1, 0.0f);
  std::vector<bool> seen(g0 * g1, false);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const auto& v = ranks[r]->*field;
    const auto& d = ranks[r]->*dims_field;
    const std::uint64_t r0 = d[0].sharded() ? r * d[0].local : 0;
    const std::uint64_t c0 = d[1].sharded() ? r * d[1].local : 0;
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

namespace {

struct Diff {
  double max_abs = 0.0, rel = 0.0;
  bool identical = true;
};

template <typename B>
Diff diff(const std::vector<float>& a, const std::vector<B>& b) {
  Diff d;
  double num = 0.0, den = 0.0;
  const std::size_t n = std::min(a.size(), b.size());
  if (a.size() != b.size()) d.identical = false;
  for (std::size_t i = 0; i < n; ++i) {
    const double e = double(a[i]) - double(b[i]);
    if constexpr (std::is_same_v<B, float>) {
      if (std::memcmp(&a[i], &b[i], 4) != 0) d.identical = false;
    } else {
      d.identical = false;
    }
    d.max_abs = std::max(d.max_abs, std::abs(e));
    if (std::isnan(e)) d.max_abs = INFINITY;
    num += e * e;
    den += double(b[i]) * double(b[i]);
  }
  d.rel = den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
  return d;
}

// Whether every block-scaled tensor's sharded dims are whole blocks, so each
// block holds the same elements as in the 1-rank run.
bool blocks_aligned(const LayerPlan& plan) {
  for (const auto& t : plan.tensors) {
    if (t.scaling == Scaling::none || t.scaling == Scaling::per_tensor || t.external) continue;
    for (int d = 0; d < 2; ++d) {
      const Dim& dim = t.dims[static_cast<std::size_t>(d)];
      if (!dim.sharded()) continue;
      std::uint64_t block = 1;
      if (t.scaling == Scaling::block_128x128) block = 128;
      if (d == t.inner_dim()) block = t.scaling == Scaling::mx_1x32 ? 32 : 128;
      if (dim.local % block != 0) return false;
    }
  }
  return true;
}

}  // namespace

double float64_bound(const Layer& layer, const std::string& tensor) {
  const auto& tol = tolerances();
  const Recipe& r = layer.recipe;
  if (!r.is_fp8()) return tol.high_precision;
  auto fmt_bound = [&](Fp8Format f) { return f == Fp8Format::e4m3 ? tol.e4m3 : tol.e5m2; };
  if (tensor == "y") return fmt_bound(r.forward);
  // dbias sums dz = dy * act'(z) in high precision; with an activation, z
  // carries the forward GEMM's FP8 error and act' amplifies it (GELU's
  // second derivative is ~0.8 near 0, and large |z| puts more of the error
  // near the bend), hence three times the forward bound (measured up to 2x).
  if (tensor == "db")
    return layer.activation == Activation::none ? tol.high_precision : 3 * fmt_bound(r.forward);
  // dX and dW: the larger operand format's bound, plus dz's own error when
  // an activation's derivative amplifies the forward error (see db).
  const double act = layer.activation == Activation::none ? 0.0 : 3 * fmt_bound(r.forward);
  return std::max(fmt_bound(r.forward), fmt_bound(r.backward)) + act;
}

namespace {

double f64_bound(const Layer& layer, const std::string& tensor) {
  return float64_bound(layer, tensor);
}

struct Expectation {
  bool exact = false;
  double tolerance = 0.0;
};

Expectation expect(const Layer& layer, const LayerPlan& plan, const std::string& tensor) {
  const bool column = layer.mode == ParallelMode::column;
  const bool multi = plan.ranks > 1;
  const bool sp = layer.layout.sequence_parallel && multi;
  const bool aligned = blocks_aligned(plan);
  bool exact = !multi;
  bool reduction_only = true;  // false: quantized values may differ too
  if (multi) {
    if (column) {
      exact = tensor == "db" || (aligned && (tensor == "y" || tensor == "dw"));
      reduction_only = aligned;
    } else {
      const bool backward_same = aligned && layer.activation == Activation::none;
      if (tensor == "y")
        exact = false, reduction_only = aligned;
      else if (tensor == "db")
        exact = !sp && backward_same, reduction_only = backward_same;
      else
        exact = backward_same, reduction_only = backward_same;
    }
  }
  // A debug fallback GEMM reads the high-precision tensor where the rank
  // holds it whole (the 1-rank run) but a dequantized FP8 copy where it was
  // gathered: its result differs by quantization, not only by order.
  if (multi) {
    for (GemmKind g : layer.debug.fallback) {
      const char* affected = g == GemmKind::fprop ? "y" : g == GemmKind::dgrad ? "dx" : "dw";
      if (tensor == affected) exact = false, reduction_only = false;
    }
  }
  if (exact) return {true, 0.0};
  return {false, reduction_only ? tolerances().reduction : 2 * f64_bound(layer, tensor)};
}

std::string fmt_ranks(std::uint32_t n) {
  return std::to_string(n) + (n == 1 ? " rank" : " ranks");
}

// Producer -> consumer pairs end to end: the consumer reads the producer's
// output on each rank, the producer's gradient is the consumer's dX. The
// N-rank and 1-rank chains differ wherever either layer's do, so they are
// compared within twice the float64 bound; errors compound along the chain,
// so a float64 bound is the sum of the bounds of the GEMMs on the path.
void verify_chains(const Spec& spec, const Plan& plan_n, const Plan& plan_1,
                   const VerifyOptions& options, VerifyReport& report) {
  for (std::size_t li = 0; li < spec.layers.size(); ++li) {
    const Layer& second = spec.layers[li];
    const Layer* first = second.input.empty() ? nullptr : spec.find_layer(second.input);
    if (!first) continue;
    if (!options.layer.empty() && options.layer != first->name && options.layer != second.name)
      continue;
    const std::string name = first->name + "->" + second.name;
    // Both layers' N-rank and 1-rank buffers live at once: about 60 bytes
    // per weight (attention_out_then_mlp: 17 GB at 8 tokens).
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
    const LayerPlan& a_n = *plan_n.find(first->name);
    const LayerPlan& b_n = *plan_n.find(second.name);
    std::vector<std::vector<ChainStepResult>> run_n, run_1;
    try {
      run_n = run_chain(*first, a_n, second, b_n, data, options.executor);
    } catch (const ExecutorError& e) {
      report.notes.push_back("chain " + name + " not run: " + e.what());
      continue;
    }
    ExecutorOptions one = options.executor;
    one.skip_collective_on_rank = -1;
    run_1 =
        run_chain(*first, *plan_1.find(first->name), second, *plan_1.find(second.name), data, one);
    const std::string rn = fmt_ranks(a_n.ranks);
    std::vector<CheckResult> rows;
    for (std::uint32_t s = 0; s < options.steps; ++s) {
      const auto ref = reference_chain_step(*first, second, options.tokens, data[s]);
      struct Field {
        std::string label;
        bool second_layer;
        std::vector<float> RankStepResult::*values;
        std::array<Dim, 2> RankStepResult::*dims;
        const std::vector<double>* ref;
        double bound;
      };
      const double y1 = f64_bound(*first, "y"), y2 = f64_bound(second, "y");
      const double dx2 = f64_bound(second, "dx");
      std::vector<Field> fields = {
          {"y (" + second.name + ")", true, &RankStepResult::y, &RankStepResult::y_dims,
           &ref.second.y, y1 + y2},
          {"dx (" + first->name + ")", false, &RankStepResult::dx, &RankStepResult::dx_dims,
           &ref.first.dx, dx2 + f64_bound(*first, "dx")},
          {"dw (" + first->name + ")", false, &RankStepResult::dw, &RankStepResult::dw_dims,
           &ref.first.dw, dx2 + f64_bound(*first, "dw")},
          {"dw (" + second.name + ")", true, &RankStepResult::dw, &RankStepResult::dw_dims,
           &ref.second.dw, y1 + f64_bound(second, "dw")}};
      std::size_t index = 0;
      auto record = [&](const std::string& check, const Diff& d, double tol) {
        const bool pass = d.rel <= tol && std::isfinite(d.rel);
        if (rows.size() <= index) {
          rows.push_back(CheckResult{name, check, d.max_abs, d.rel, tol, false, pass});
        } else {
          auto& c = rows[index];
          c.max_abs = std::max(c.max_abs, d.max_abs);
          c.rel = std::max(c.rel, d.rel);
          c.pass = c.pass && pass;
        }
        ++index;
      };
      for (const auto& f : fields) {
        std::vector<const RankStepResult*> rs_n, rs_1;
        for (const auto& r : run_n) rs_n.push_back(f.second_layer ? &r[s].second : &r[s].first);
        rs_1.push_back(f.second_layer ? &run_1[0][s].second : &run_1[0][s].first);
        const Assembled an = assemble(rs_n, f.values, f.dims);
        const Assembled a1 = assemble(rs_1, f.values, f.dims);
        record(f.label + ": " + rn + " vs 1 rank", diff(an.values, a1.values), 2 * f.bound);
        record(f.label + ": " + rn + " vs float64", diff(an.values, *f.ref), f.bound);
        record(f.label + ": 1 rank vs float64", diff(a1.values, *f.ref), f.bound);
      }
    }
    report.checks.insert(report.checks.end(), rows.begin(), rows.end());
  }
}

}  // namespace

const Tolerances& tolerances() {
  static const Tolerances t;
  return t;
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
  PlanOptions many;
  many.ranks = options.ranks;
  many.tokens = options.tokens;
  PlanOptions one;
  one.ranks = 1;
  one.tokens = options.tokens;
  const Plan plan_n = plan_spec(spec, many);
  const Plan plan_1 = plan_spec(spec, one);
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
  VerifyReport report;
  for (std::size_t li = 0; li < spec.layers.size(); ++li) {
    const Layer& layer = spec.layers[li];
    if (!options.layer.empty() && layer.name != options.layer) continue;
    LayerPlan pn = *plan_n.find(layer.name);
    if (options.edit_plan) options.edit_plan(pn);
    const LayerPlan& p1 = *plan_1.find(layer.name);
    std::vector<LayerData> data;
    for (std::uint32_t s = 0; s < options.steps; ++s)
      data.push_back(
          random_layer_data(layer, options.tokens, options.seed * 1000003 + li * 7919 + s));
    ExecutorOptions one_exec = options.executor;
    one_exec.skip_plan_check = false;
    one_exec.skip_collective_on_rank = -1;
    const auto run_n = run_layer(layer, pn, data, options.executor);
    const auto run_1 = run_layer(layer, p1, data, one_exec);
    const std::string rn = fmt_ranks(pn.ranks);
    struct Row {
      CheckResult c;
      bool first = true;
    };
    std::vector<Row> rows;
    auto record = [&](std::size_t index, const std::string& check, const Diff& d, bool bitwise,
                      double tol) {
      if (rows.size() <= index) rows.resize(index + 1);
      auto& row = rows[index];
      auto& c = row.c;
      const bool pass = bitwise ? d.identical : (d.rel <= tol && std::isfinite(d.rel));
      if (row.first) {
        c = CheckResult{layer.name, check, d.max_abs, d.rel, tol, bitwise, pass};
        row.first = false;
      } else {
        c.max_abs = std::max(c.max_abs, d.max_abs);
        c.rel = std::max(c.rel, d.rel);
        c.pass = c.pass && pass;
      }
    };
    for (std::uint32_t s = 0; s < options.steps; ++s) {
      std::vector<const RankStepResult*> ranks_n, ranks_1;
      for (const auto& r : run_n) ranks_n.push_back(&r[s]);
      ranks_1.push_back(&run_1[0][s]);
      const ReferenceResult ref = reference_layer_step(layer, options.tokens, data[s]);
      struct Field {
        const char* name;
        std::vector<float> RankStepResult::*values;
        std::array<Dim, 2> RankStepResult::*dims;
        const std::vector<double>* ref;
      };
      std::vector<Field> fields = {{"y", &RankStepResult::y, &RankStepResult::y_dims, &ref.y},
                                   {"dx", &RankStepResult::dx, &RankStepResult::dx_dims, &ref.dx},
                                   {"dw", &RankStepResult::dw, &RankStepResult::dw_dims, &ref.dw}};
      if (layer.bias)
        fields.push_back({"db", &RankStepResult::db, &RankStepResult::db_dims, &ref.db});
      std::size_t index = 0;
      bool replicas = true;
      for (const auto& f : fields) {
        const Assembled an = assemble(ranks_n, f.values, f.dims);
        const Assembled a1 = assemble(ranks_1, f.values, f.dims);
        replicas = replicas && an.replicas_agree;
        const Expectation e = expect(layer, pn, f.name);
        record(index++, std::string(f.name) + ": " + rn + " vs 1 rank", diff(an.values, a1.values),
               e.exact, e.tolerance);
        const double bound = f64_bound(layer, f.name);
        record(index++, std::string(f.name) + ": " + rn + " vs float64", diff(an.values, *f.ref),
               false, bound);
        record(index++, std::string(f.name) + ": 1 rank vs float64", diff(a1.values, *f.ref), false,
               bound);
      }
      Diff rep;
      rep.identical = replicas;
      record(index++, "replicated outputs identical on all ranks", rep, true, 0.0);
      if (layer.recipe.kind == RecipeKind::delayed) {
        // Scales and amax histories: the same on every rank, and the 1-rank run's.
        Diff across, vs1;
        for (const auto* r : ranks_n)
          across.identical = across.identical && r->state == ranks_n[0]->state;
        std::vector<float> a, b;
        for (const auto& [k, v] : ranks_n[0]->state.delayed) {
          a.push_back(v.scale);
          a.insert(a.end(), v.history.begin(), v.history.end());
        }
        for (const auto& [k, v] : ranks_1[0]->state.delayed) {
          b.push_back(v.scale);
          b.insert(b.end(), v.history.begin(), v.history.end());
        }
        vs1 = diff(a, b);
        record(index++, "delayed scales/histories identical on all ranks", across, true, 0.0);
        const bool exact = layer.mode == ParallelMode::column ||
                           layer.activation == Activation::none || pn.ranks == 1;
        record(index++, "delayed scales/histories: " + rn + " vs 1 rank", vs1, exact,
               tolerances().reduction);
      }
    }
    for (auto& r : rows) report.checks.push_back(r.c);
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
    o << std::defaultfloat << "  " << (c.pass ? "pass" : "FAIL") << "\n";
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
  for (const auto& c : report.checks) {
    o << (first ? "\n" : ",\n") << "  {\"layer\": \"" << c.layer << "\", \"check\": \"" << c.check
      << "\", \"max_abs\": ";
    num(c.max_abs);
    o << ", \"rel\": ";
    num(c.rel);
    o << ", \"tolerance\": ";
    if (c.bitwise)
      o << "\"bitwise\"";
    else
      num(c.tolerance);
    o << ", \"pass\": " << (c.pass ? "true" : "false") << "}";
    first = false;
  }
  o << "\n]}\n";
  return o.str();
}

}  // namespace fp8c::cpu
