#include "runtime/gpu/gpu_verify.hpp"

#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "codegen/plan/planner.hpp"
#include "collectives/device/device_communicator.hpp"
#include "runtime/cpu/quantize.hpp"
#include "runtime/cpu/reference.hpp"
#include "runtime/cpu/verify_bounds.hpp"
#include "runtime/gpu/kernel_set.hpp"
#include "runtime/gpu/rank_executor.hpp"
#include "runtime/gpu/run_layer.hpp"
#include "runtime/reference/activation_bound.hpp"

namespace fp8c::runtime {
namespace {

// The GPU evaluates GELU and SiLU (and their derivatives) with fast
// intrinsics (tanh.approx, ex2.approx: relative errors below 2^-10.9 and
// 2^-22), cuBLASLt's GELU epilogue with its own formula: the two sides'
// act and act' may differ by this much, relative to the pre-activation.
constexpr double kActEvaluation = 0x1p-10;

double act_error(Activation a) {
  return a == Activation::gelu || a == Activation::silu ? kActEvaluation : 0.0;
}

// FP8 data and scales quantized straight from the step's inputs: the same
// kernels' arithmetic on both sides, so they must agree bit for bit.
std::vector<std::string> exact_tensors(const LayerPlan& plan) {
  std::vector<std::string> names;
  for (const Step& s : plan.forward) {
    const auto* q = s.as<QuantizeStep>();
    if (!q || !plan.tensor(q->src).external) continue;
    for (int id : {q->rowwise, q->columnwise}) {
      if (id == kNoTensor) continue;
      const Tensor& t = plan.tensor(id);
      names.push_back(t.name);
      if (t.block_scaled()) names.push_back(plan.tensor(t.scale).name);
    }
  }
  return names;
}

// What the bounds read on both sides: every GEMM's operands, every partial
// a sum over the group reads, the sources of the column sums (dbias), and
// the FP8 output's scale.
std::vector<std::string> bound_tensors(const LayerPlan& plan) {
  std::vector<std::string> names = exact_tensors(plan);
  for (const auto* pass : {&plan.forward, &plan.backward})
    for (const Step& s : *pass) {
      if (const auto* g = s.as<GemmStep>()) {
        names.push_back(plan.tensor(g->a).name);
        names.push_back(plan.tensor(g->b).name);
      } else if (s.kind() == StepKind::reduce_scatter || s.kind() == StepKind::all_reduce) {
        names.push_back(plan.tensor(s.inputs().at(0)).name);
      } else if (const auto* q = s.as<QuantizeStep>(); q && q->dbias != kNoTensor) {
        names.push_back(plan.tensor(q->src).name);
      } else if (const auto* e = s.as<GradEpilogueStep>(); e && e->dbias != kNoTensor) {
        names.push_back(plan.tensor(e->dy).name);
      }
    }
  if (plan.io.y_scale != kNoTensor) names.push_back(plan.tensor(plan.io.y_scale).name);
  // A dgrad handing its producer FP8 dz: the z its act' reads, its scale,
  // and what its epilogue writes beside dz (handed_dz_side_outputs).
  if (plan.io.dx_fp8_col != kNoTensor)
    for (int id : {plan.io.dx_dact_input, plan.io.dx_scale, plan.io.dx, plan.io.dx_fp8_col,
                   plan.io.dx_db, plan.io.dx_amax})
      if (id != kNoTensor) names.push_back(plan.tensor(id).name);
  return names;
}

const std::vector<float>& logical(const cpu::RankStepResult& r, const std::string& name) {
  static const std::vector<float> none;
  auto it = r.captured.find(name);
  return it == r.captured.end() ? none : it->second.logical;
}

// |a - b| element-wise, rounded up; empty when the two are bit-identical
// (the common case: both sides quantized the same input with the same
// arithmetic), so the caller can skip a bound GEMM of zeros.
std::vector<float> abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  bool any = a.size() != b.size();
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d[i] = static_cast<float>(std::fabs(double(a[i]) - double(b[i])) * (1 + 0x1p-22));
    any = any || d[i] != 0;
  }
  if (!any) d.clear();
  return d;
}

// The lowered step of a plan GEMM step, or null.
const LoweredStep* lowered_step_of(const LoweredLayer& lowered, const LayerPlan& plan,
                                   const GemmStep& g) {
  for (const auto& [steps, low] :
       {std::pair{&plan.forward, &lowered.forward}, std::pair{&plan.backward, &lowered.backward}})
    for (std::size_t i = 0; i < steps->size() && i < low->size(); ++i)
      if ((*steps)[i].as<GemmStep>() == &g) return &(*low)[i];
  return nullptr;
}

// Whether the GPU executor runs `g` on operands dequantized to the layer
// dtype (the lowering's fallback for block-scaled operands its GEMM cannot
// read), as `lowered`, the layer's lowering for this GPU, says.
bool runs_dequantized(const LoweredLayer& lowered, const LayerPlan& plan, const GemmStep& g) {
  if (const LoweredStep* l = lowered_step_of(lowered, plan, g))
    if (const GemmCall* c = l->find<GemmCall>())
      return c->operands == GemmCall::Operands::dequantized;
  // Not one of the plan's own steps: assume the looser bound.
  return plan.tensor(g.a).block_scaled() || plan.tensor(g.b).block_scaled();
}

// |C_gpu - C_cpu| of one rank's GEMM before the store: the operands'
// differences (an FP8 code the other side rounded differently, an operand
// the GPU dequantized to the layer dtype), and both sides' fp32
// accumulations in different orders.
//
// With dA = |A_g - A_c| and dB = |B_g - B_c|, the operand term is
// dA |B_c| + |A_g| dB, and the two accumulations are bounded by gamma_K
// (|A_g||B_g| + |A_c||B_c|). Since |A_c| <= |A_g| + dA and
// |B_c| <= |B_g| + dB, |A_c||B_c| <= |A_g||B_g| + |A_g| dB + dA |B_c|, so
// the whole bound follows from at most three |.||.| GEMMs instead of four,
// and only one where both operands agree bit for bit.
// `magnitude`, where given: sum |A_g||B_g|, which bounds |C_gpu|.
std::vector<double> gemm_difference(const Layer& layer, const LayerPlan& plan,
                                    const LoweredLayer& lowered, const GemmStep& g,
                                    const cpu::RankStepResult& gpu, const cpu::RankStepResult& cpu,
                                    std::vector<double>* magnitude = nullptr) {
  const std::string an = plan.tensor(g.a).name, bn = plan.tensor(g.b).name;
  const auto &ag = logical(gpu, an), &ac = logical(cpu, an);
  const auto &bg = logical(gpu, bn), &bc = logical(cpu, bn);
  if (ag.empty() || ac.empty() || bg.empty() || bc.empty()) return {};
  if (ag.size() != ac.size() || bg.size() != bc.size()) return {};
  const std::vector<double> sg = cpu::abs_products(plan, g, ag, bg);
  std::vector<double> operands(sg.size(), 0.0);
  // Adds |x||y| to the operand term; false when the shapes disagree.
  const auto add = [&](const std::vector<float>& x, const std::vector<float>& y) {
    const std::vector<double> p = cpu::abs_products(plan, g, x, y);
    if (p.size() != operands.size()) return false;
    for (std::size_t i = 0; i < p.size(); ++i) operands[i] += p[i];
    return true;
  };
  if (const std::vector<float> da = abs_difference(ag, ac); !da.empty() && !add(da, bc)) return {};
  if (const std::vector<float> db = abs_difference(bg, bc); !db.empty() && !add(ag, db)) return {};
  const Tensor& a = plan.tensor(g.a);
  const std::uint64_t k = a.dims[static_cast<std::size_t>(g.role == GemmRole::wgrad ? 0 : 1)].local;
  // Block-scaled operands the GPU dequantized to the layer dtype first: one
  // more rounding of each operand (codegen/lower).
  const bool dequantized = runs_dequantized(lowered, plan, g);
  const double ud = cpu::unit_roundoff(layer.dtype);
  // FP8 operands the tensor cores read: their FP8 MMA aligns each group of
  // products to its largest exponent and keeps about 14 bits (DeepSeek-V3,
  // section 3.3.2) before cuBLASLt promotes to fp32. Measured on the H200
  // (every example and tests/specs spec): differences up to about 2^-12 of
  // the absolute products; the allowance is 2^-10.
  const bool tensor_core_fp8 = !g.high_precision && !dequantized;
  const double gk = cpu::gamma_fp32(k);
  std::vector<double> e(sg.size());
  for (std::size_t i = 0; i < e.size(); ++i)
    e[i] = (1 + gk) * operands[i] + 2 * gk * sg[i] + (dequantized ? 2.1 * ud * sg[i] : 0.0) +
           (tensor_core_fp8 ? 0x1p-10 * sg[i] : 0.0);
  if (magnitude) *magnitude = sg;
  return e;
}

// |dz_gpu - dz_cpu| before the FP8 store of a dgrad handing its producer dz
// (dz = act'(z) C): the GEMM's difference through |act'| <= L, act'
// evaluated differently (runtime/reference/activation_bound.hpp) times
// |C| <= sum |a||b| + the GEMM's difference, and, after cuBLASLt, C rounded
// to the high-precision staging type before act' on the GPU.
std::vector<double> handed_dz_difference(const Layer& layer, const LayerPlan& plan,
                                         const LoweredLayer& lowered, const GemmStep& g,
                                         const cpu::RankStepResult& gpu,
                                         const cpu::RankStepResult& cpu) {
  std::vector<double> sg;
  std::vector<double> e = gemm_difference(layer, plan, lowered, g, gpu, cpu, &sg);
  if (e.empty() || sg.size() != e.size()) return {};
  const Activation dact = g.epilogue.dact;
  std::vector<float> z;
  if (g.epilogue.dact_input != kNoTensor) {
    z = logical(cpu, plan.tensor(g.epilogue.dact_input).name);
    if (z.size() != e.size()) return {};
  }
  double staged = 0.0;
  if (const LoweredStep* l = lowered_step_of(lowered, plan, g))
    if (const KernelLaunch* k = l->find_launch(LaunchRole::gradient_after_gemm))
      staged = cpu::unit_roundoff(std::get<QuantizeKernel>(k->kernel.description).input);
  const double lip = cpu::activation_lipschitz(dact);
  for (std::size_t i = 0; i < e.size(); ++i) {
    const double c = sg[i] + e[i];
    const double act = z.empty() ? 0.0 : activation_grad_error_bound(dact, z[i]);
    e[i] = lip * e[i] + c * (act + lip * staged);
  }
  return e;
}

// What a dgrad handing its producer FP8 dz writes beside it, on the GPU
// against the CPU: its columnwise copy (the GPU's own dz bytes transposed,
// exactly), the producer's dbias (column sums of the dz before its store:
// each side's sum over M in fp32, in its own order, of values at most
// handed_dz_difference apart; then the store) and the amax (of those
// values: at most their largest difference apart).
// `e`: handed_dz_difference of this rank and step (empty: not made).
void compare_handed_dz_side_outputs(cpu::VerifyReport& report, const Layer& layer,
                                    const LayerPlan& plan, const std::vector<double>& e,
                                    const cpu::RankStepResult& gpu, const cpu::RankStepResult& cpu,
                                    const std::string& at) {
  const Tensor& row = plan.tensor(plan.io.dx);
  const std::size_t rows = row.dims[0].local, cols = row.dims[1].local;
  const auto bytes = [](const cpu::RankStepResult& r, const std::string& name) {
    auto it = r.captured.find(name);
    return it == r.captured.end() ? std::vector<std::uint8_t>{} : it->second.bytes;
  };
  const std::vector<std::uint8_t> dz = bytes(gpu, row.name);
  const std::vector<std::uint8_t> col = bytes(gpu, plan.tensor(plan.io.dx_fp8_col).name);
  std::vector<std::uint8_t> want(dz.size());
  if (dz.size() == rows * cols) cpu::transpose_bytes(dz, rows, cols, want);
  report.checks.push_back(cpu::compare_bitwise(
      layer.name, plan.tensor(plan.io.dx_fp8_col).name + " bytes: gpu's dz transposed" + at,
      std::vector<float>(col.begin(), col.end()), std::vector<float>(want.begin(), want.end())));
  const std::vector<float>& dzc = logical(cpu, row.name);
  double scale_inv = 1.0;
  if (const auto& sc = logical(cpu, plan.tensor(plan.io.dx_scale).name); !sc.empty() && sc[0] != 0)
    scale_inv = 1.0 / std::fabs(double(sc[0]));
  const double u8 = cpu::unit_roundoff(row.type);
  const double sub = 2 * cpu::fp8_subnormal_half_step(row.type) * scale_inv;
  if (plan.io.dx_db != kNoTensor) {
    const Tensor& db = plan.tensor(plan.io.dx_db);
    const std::vector<float>& dg = logical(gpu, db.name);
    const std::vector<float>& dc = logical(cpu, db.name);
    std::vector<double> bound;
    if (e.size() == rows * cols && dzc.size() == rows * cols && dc.size() == cols) {
      bound.assign(cols, 0.0);
      const double gk = cpu::gamma_fp32(rows);
      for (std::size_t t = 0; t < rows; ++t)
        for (std::size_t j = 0; j < cols; ++j) {
          const double v = std::fabs(double(dzc[t * cols + j])) * (1 + 2 * u8) + sub;
          bound[j] += e[t * cols + j] + 2 * gk * v;
        }
      const double us = cpu::unit_roundoff(db.type);
      for (std::size_t j = 0; j < cols && j < dg.size(); ++j)
        bound[j] =
            (bound[j] + us * (std::fabs(double(dg[j])) + std::fabs(double(dc[j])))) * (1 + 1e-6);
    }
    cpu::CheckResult r =
        cpu::compare_within(layer.name, db.name + ": gpu vs cpu" + at, dg, dc, bound);
    if (bound.empty()) r.pass = false, r.why = "the bound's inputs were not captured";
    report.checks.push_back(r);
  }
  const std::string amax = plan.tensor(plan.io.dx_amax).name;
  const std::vector<float>& ag = logical(gpu, amax);
  const std::vector<float>& ac = logical(cpu, amax);
  double largest = 0;
  for (double x : e) largest = std::max(largest, x);
  cpu::CheckResult r = cpu::compare_within(layer.name, amax + ": gpu vs cpu" + at, ag, ac,
                                           {largest * (1 + 1e-6) + 1e-30});
  if (e.empty()) r.pass = false, r.why = "the bound's inputs were not captured";
  report.checks.push_back(r);
}

// |column sums of dz on the GPU - on the CPU| of one rank: dz = dy act'(z)
// evaluated differently, then summed in different orders.
std::vector<double> column_sum_difference(const Layer& layer, const LayerPlan& plan, int source,
                                          const cpu::RankStepResult& cpu) {
  const std::vector<float>& dy = logical(cpu, plan.tensor(source).name);
  const std::size_t rows = plan.tensor(source).dims[0].local,
                    cols = plan.tensor(source).dims[1].local;
  if (dy.size() != rows * cols) return {};
  const double lip = cpu::activation_lipschitz(layer.activation);
  std::vector<double> e(cols, 0.0);
  for (std::size_t t = 0; t < rows; ++t)
    for (std::size_t j = 0; j < cols; ++j) {
      const double v = std::fabs(double(dy[t * cols + j]));
      e[j] += v * (act_error(layer.activation) + 2 * cpu::gamma_fp32(rows) * lip);
    }
  return e;
}

// The source tensor of a column sum (dbias) output.
int column_sum_source(const LayerPlan& plan, int dbias) {
  for (const Step& s : plan.backward) {
    if (const auto* q = s.as<QuantizeStep>(); q && q->dbias == dbias) return q->src;
    if (const auto* e = s.as<GradEpilogueStep>(); e && e->dbias == dbias) return e->dy;
  }
  return kNoTensor;
}

// One rank's (before-store) difference of the value a field comes from.
std::vector<double> rank_difference(const Layer& layer, const LayerPlan& plan,
                                    const LoweredLayer& lowered, const cpu::OutputOrigin& o,
                                    int partial_or_output, const cpu::RankStepResult& gpu,
                                    const cpu::RankStepResult& cpu) {
  if (o.gemm) return gemm_difference(layer, plan, lowered, *o.gemm, gpu, cpu);
  if (o.column_sum)
    return column_sum_difference(layer, plan, column_sum_source(plan, partial_or_output), cpu);
  return {};
}

// Rows [first, first + rows) of a [full rows][cols] vector: a rank's shard of
// an output reduce-scattered along its first dim.
std::vector<double> shard_rows(const std::vector<double>& full, const Tensor& out, int rank) {
  if (!out.dims[0].sharded()) return full;
  const std::size_t cols = out.dims[1].local, rows = out.dims[0].local;
  const auto first = static_cast<std::size_t>(rank) * rows * cols;
  return std::vector<double>(full.begin() + static_cast<std::ptrdiff_t>(first),
                             full.begin() + static_cast<std::ptrdiff_t>(first + rows * cols));
}

struct Field {
  const char* name;
  std::vector<float> cpu::RankStepResult::*values;
  int LayerIo::*io;
};

std::vector<Field> fields_of(const Layer& layer, const LayerPlan& plan) {
  std::vector<Field> f = {
      {"y", &cpu::RankStepResult::y, plan.io.y != kNoTensor ? &LayerIo::y : &LayerIo::y_fp8}};
  if (plan.io.z != kNoTensor) f.push_back({"z", &cpu::RankStepResult::z, &LayerIo::z});
  f.push_back({"dx", &cpu::RankStepResult::dx, &LayerIo::dx});
  f.push_back({"dw", &cpu::RankStepResult::dw, &LayerIo::dw});
  if (layer.bias) f.push_back({"db", &cpu::RankStepResult::db, &LayerIo::db});
  return f;
}

// Rank `rank`'s GPU results against the CPU reference's (which took the
// GPU's pre-activation), step `s`. `summed_difference(field)`: the whole
// group's GEMM differences for a field summed over the group.
template <typename Summed>
void compare_rank(cpu::VerifyReport& report, const Layer& layer, const LayerPlan& plan,
                  const LoweredLayer& lowered, const cpu::RankStepResult& gpu,
                  const cpu::RankStepResult& cpu, int rank, std::size_t step,
                  const std::string& where, Summed&& summed_difference) {
  const std::string at = " rank " + std::to_string(rank) + " step " + std::to_string(step) + where;
  for (const auto& [name, c] : cpu.captured) {
    if (name.empty()) continue;
    bool exact = false;
    for (const auto& e : exact_tensors(plan)) exact = exact || e == name;
    if (!exact) continue;
    auto it = gpu.captured.find(name);
    const std::vector<std::uint8_t> none;
    const auto& gb = it == gpu.captured.end() ? none : it->second.bytes;
    report.checks.push_back(cpu::compare_bitwise(
        layer.name, name + " bytes: gpu vs cpu" + at, std::vector<float>(gb.begin(), gb.end()),
        std::vector<float>(c.bytes.begin(), c.bytes.end())));
  }
  double scale_inv = 1.0;
  if (plan.io.y_scale != kNoTensor)
    if (const auto& s = logical(cpu, plan.tensor(plan.io.y_scale).name); !s.empty() && s[0] != 0)
      scale_inv = 1.0 / std::fabs(double(s[0]));
  const double ud = cpu::unit_roundoff(layer.dtype);
  std::vector<double> dz_difference;  // a handed dz's, for what is written beside it
  for (const Field& f : fields_of(layer, plan)) {
    const int id = plan.io.*f.io;
    const cpu::OutputOrigin o = cpu::trace_output(plan, id);
    const std::vector<float>& g = gpu.*f.values;
    const std::vector<float>& c = cpu.*f.values;
    cpu::DifferenceBeforeStore d;
    double field_scale_inv = scale_inv;
    if (o.summed_partial == kNoTensor) {
      if (o.gemm && o.gemm->role == GemmRole::dgrad && plan.tensor(id).is_fp8()) {
        // The producer's FP8 dz, with its gradient scale.
        dz_difference = handed_dz_difference(layer, plan, lowered, *o.gemm, gpu, cpu);
        d.before_store = dz_difference;
        field_scale_inv = 1.0;
        if (const auto& sc = logical(cpu, plan.tensor(plan.io.dx_scale).name);
            !sc.empty() && sc[0] != 0)
          field_scale_inv = 1.0 / std::fabs(double(sc[0]));
      } else if (!o.gemm && !o.column_sum) {
        // A copy of what both sides were given alike (a bias gradient the
        // consumer's dgrad summed, made on the host for a layer run alone).
        d.before_store.assign(c.size(), 0.0);
      } else {
        d.before_store = rank_difference(layer, plan, lowered, o, id, gpu, cpu);
      }
      d.magnitude.assign(d.before_store.size(), 0.0);
    } else {
      // Every rank's difference, plus each side's roundings of the partials
      // and running sums (2R - 1 each, relative to sum |p_r|).
      std::vector<double> magnitude;
      std::vector<double> full = summed_difference(f, o, magnitude);
      if (!full.empty()) {
        for (std::size_t i = 0; i < full.size(); ++i)
          full[i] += 2 * (2.0 * plan.ranks - 1) * ud * magnitude[i] * (1 + ud);
        d.before_store = shard_rows(full, plan.tensor(id), rank);
        d.magnitude = shard_rows(magnitude, plan.tensor(id), rank);
      }
    }
    cpu::CheckResult r;
    const std::string check = std::string(f.name) + ": gpu vs cpu" + at;
    if (d.before_store.size() != c.size()) {
      r.layer = layer.name;
      r.check = check;
      r.why = "the bound's inputs were not captured";
    } else {
      r = cpu::compare_within(layer.name, check, g, c,
                              cpu::store_bound(o, plan.tensor(id).type, d, g, c, field_scale_inv,
                                               act_error(layer.activation)));
    }
    report.checks.push_back(r);
  }
  if (plan.io.dx_fp8_col != kNoTensor)
    compare_handed_dz_side_outputs(report, layer, plan, dz_difference, gpu, cpu, at);
  // Delayed state, key by key: bit for bit, but dz's amax (and so its
  // history and scale) within kActEvaluation-driven 2^-9 where the GPU
  // evaluates act' differently.
  for (const auto& [key, want] : cpu.state.delayed) {
    auto it = gpu.state.delayed.find(key);
    const std::string check = "state '" + key + "': gpu vs cpu" + at;
    if (it == gpu.state.delayed.end()) {
      cpu::CheckResult r;
      r.layer = layer.name;
      r.check = check;
      r.why = "no delayed state for '" + key + "' on the GPU";
      report.checks.push_back(r);
      continue;
    }
    std::vector<float> a{it->second.scale}, b{want.scale};
    a.insert(a.end(), it->second.history.begin(), it->second.history.end());
    b.insert(b.end(), want.history.begin(), want.history.end());
    if (key == "dz" && act_error(layer.activation) > 0) {
      std::vector<double> bound(b.size());
      for (std::size_t i = 0; i < b.size(); ++i) bound[i] = 0x1p-9 * std::fabs(double(b[i]));
      report.checks.push_back(cpu::compare_within(layer.name, check, a, b, bound));
    } else {
      report.checks.push_back(cpu::compare_bitwise(layer.name, check, a, b));
    }
  }
  for (const auto& [key, v] : gpu.state.delayed)
    if (!cpu.state.delayed.count(key)) {
      cpu::CheckResult r;
      r.layer = layer.name;
      r.check = "state '" + key + "': gpu vs cpu" + at;
      r.why = "delayed state for '" + key + "' on the GPU only";
      report.checks.push_back(r);
    }
}

// Refuses what the CPU reference cannot do in reasonable time.
void check_size(const Spec& spec, const cpu::VerifyOptions& options) {
  if (!options.layer.empty() && !spec.find_layer(options.layer))
    throw cpu::VerifyError("no layer '" + options.layer + "'");
  if (options.steps == 0) throw cpu::VerifyError("--steps must be at least 1");
  for (const Layer& layer : spec.layers) {
    if (!options.layer.empty() && layer.name != options.layer) continue;
    const double flops = cpu::layer_step_flops(layer, options.tokens);
    if (flops > options.max_flops && !options.force)
      throw cpu::VerifyError("layer '" + layer.name + "': one step is " + std::to_string(flops) +
                             " GEMM FLOPs for the CPU reference (limit " +
                             std::to_string(options.max_flops) +
                             " without --force); use fewer --tokens or pass --force");
  }
}

std::vector<cpu::LayerData> layer_data(const Layer& layer, std::size_t index,
                                       const cpu::VerifyOptions& options) {
  std::vector<cpu::LayerData> data;
  for (std::uint32_t s = 0; s < options.steps; ++s)
    data.push_back(
        cpu::random_layer_data(layer, options.tokens, options.seed * 1000003 + index * 7919 + s));
  return data;
}

// The CPU reference's options: the GPU's pre-activations (per rank and step)
// replace the CPU's before backward, so both backward passes start from the
// same z.
cpu::ExecutorOptions reference_options(const LayerPlan& plan, const cpu::VerifyOptions& options,
                                       const std::vector<std::vector<cpu::RankStepResult>>& gpu) {
  cpu::ExecutorOptions ce = options.executor;
  ce.backend = collectives::Backend::kInProcess;
  ce.capture = bound_tensors(plan);
  if (plan.io.z != kNoTensor)
    for (std::size_t s = 0; s < options.steps; ++s) {
      ce.replace.emplace_back();
      for (std::size_t r = 0; r < gpu.size(); ++r) {
        if (gpu[r].size() <= s) continue;
        cpu::Replacement z;
        z.rank = static_cast<int>(r);
        z.tensor = plan.io.z;
        z.values = gpu[r][s].z;
        ce.replace.back().push_back(z);
      }
    }
  return ce;
}

// The accuracy contract itself: the GPU's global tensors against the
// float64 reference of the unquantized math (backward given the GPU's own
// z), within the CPU oracle's bounds, and replicas identical on all ranks.
void compare_float64(cpu::VerifyReport& report, const Layer& layer, const LayerPlan& plan,
                     const std::vector<std::vector<cpu::RankStepResult>>& gpu,
                     const std::vector<cpu::LayerData>& data, std::uint64_t tokens,
                     const std::string& where) {
  for (std::size_t s = 0; s < data.size(); ++s) {
    std::vector<const cpu::RankStepResult*> ranks;
    for (const auto& r : gpu) ranks.push_back(&r[s]);
    const cpu::Assembled z =
        cpu::assemble(ranks, &cpu::RankStepResult::z, &cpu::RankStepResult::z_dims);
    cpu::ReferenceResult ref = cpu::reference_layer_step(
        layer, tokens, data[s], plan.io.z != kNoTensor ? &z.values : nullptr);
    // A handed dz (chain_hands_dz): dx times act' of the z it read.
    double dz_factor = 1.0;
    if (plan.io.dx_dact_input != kNoTensor) {
      const Tensor& zt = plan.tensor(plan.io.dx_dact_input);
      std::vector<const std::vector<float>*> shards;
      std::vector<std::array<Dim, 2>> dims;
      for (const auto* r : ranks) {
        shards.push_back(&logical(*r, zt.name));
        dims.push_back(zt.dims);
      }
      cpu::RankStepResult whole;
      whole.captured[zt.name].logical = cpu::assemble_shards(shards, dims).values;
      dz_factor = cpu::handed_dz_reference(plan, whole, ref.dx);
    }
    double zn = 0, yn = 0;
    for (double v : ref.z) zn += v * v;
    for (double v : ref.y) yn += v * v;
    const double z_over_y = yn > 0 ? std::sqrt(zn / yn) : 1.0;
    struct F {
      const char* name;
      std::vector<float> cpu::RankStepResult::*values;
      std::array<Dim, 2> cpu::RankStepResult::*dims;
      const std::vector<double>* ref;
    };
    std::vector<F> fields = {{"y", &cpu::RankStepResult::y, &cpu::RankStepResult::y_dims, &ref.y}};
    if (plan.io.z != kNoTensor)
      fields.push_back({"z", &cpu::RankStepResult::z, &cpu::RankStepResult::z_dims, &ref.z});
    fields.push_back({"dx", &cpu::RankStepResult::dx, &cpu::RankStepResult::dx_dims, &ref.dx});
    fields.push_back({"dw", &cpu::RankStepResult::dw, &cpu::RankStepResult::dw_dims, &ref.dw});
    if (layer.bias)
      fields.push_back({"db", &cpu::RankStepResult::db, &cpu::RankStepResult::db_dims, &ref.db});
    bool replicas = true;
    for (const auto& f : fields) {
      const cpu::Assembled g = cpu::assemble(ranks, f.values, f.dims);
      replicas = replicas && g.replicas_agree;
      report.checks.push_back(cpu::compare_relative(
          layer.name, std::string(f.name) + ": gpu vs float64 step " + std::to_string(s) + where,
          g.values, *f.ref,
          (std::string(f.name) == "dx" ? dz_factor : 1.0) *
              cpu::float64_bound(layer, plan, f.name, z_over_y)));
    }
    cpu::CheckResult rep = cpu::compare_bitwise(
        layer.name, "replicas identical on all ranks step " + std::to_string(s) + where,
        {replicas ? 1.0f : 0.0f}, {1.0f});
    if (!replicas) rep.why = "a tensor every rank holds whole differs between ranks";
    report.checks.push_back(rep);
  }
}

// Calls body(layer, its plan, its data) for each layer verify was asked
// for, planned for `ranks`.
template <typename Body>
void for_each_layer(const Spec& spec, const cpu::VerifyOptions& options,
                    std::optional<std::uint32_t> ranks, Body&& body) {
  check_size(spec, options);
  PlanOptions po;
  po.ranks = ranks;
  po.tokens = options.tokens;
  const Plan plan = plan_spec(spec, po);
  for (std::size_t li = 0; li < spec.layers.size(); ++li) {
    const Layer& layer = spec.layers[li];
    if (!options.layer.empty() && layer.name != options.layer) continue;
    body(layer, *plan.find(layer.name), layer_data(layer, li, options));
  }
}

// sum_r |p_r| of a summed field's partial over the CPU reference's ranks.
std::vector<double> partial_magnitude(const LayerPlan& plan, const cpu::OutputOrigin& o,
                                      const std::vector<const cpu::RankStepResult*>& cpu) {
  std::vector<double> m;
  for (const auto* r : cpu) {
    const auto& p = logical(*r, plan.tensor(o.summed_partial).name);
    if (m.empty()) m.assign(p.size(), 0.0);
    if (p.size() != m.size()) return {};
    for (std::size_t i = 0; i < p.size(); ++i) m[i] += std::fabs(double(p[i]));
  }
  return m;
}

}  // namespace

cpu::VerifyReport verify_spec_on_gpu(const Spec& spec, const cpu::VerifyOptions& options,
                                     const Device& device, const Jit& jit) {
  cpu::VerifyReport report;
  for_each_layer(
      spec, options, options.ranks,
      [&](const Layer& layer, const LayerPlan& lp, const std::vector<cpu::LayerData>& data) {
        GpuRunOptions ge;
        ge.capture = bound_tensors(lp);
        ge.timeout = options.executor.timeout;
        const auto gpu = run_layer_on_gpu(device, jit, layer, lp, data, ge);
        const LoweredLayer lowered = lower_for_gpu(layer, lp, cublaslt_lower_options());
        const auto ref = cpu::run_layer(layer, lp, data, reference_options(lp, options, gpu));
        const std::string where = " (" + std::to_string(lp.ranks) + " ranks on one GPU)";
        for (std::size_t s = 0; s < data.size(); ++s) {
          std::vector<const cpu::RankStepResult*> cpu_ranks;
          for (const auto& r : ref) cpu_ranks.push_back(&r[s]);
          // A summed field's difference covers every rank: made
          // once per field and step, read by each rank's compare.
          std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> made;
          const auto summed = [&](const Field& f, const cpu::OutputOrigin& o,
                                  std::vector<double>& magnitude) {
            auto it = made.find(f.name);
            if (it == made.end()) {
              std::vector<double> m = partial_magnitude(lp, o, cpu_ranks);
              std::vector<double> total(m.size(), 0.0);
              for (std::size_t r = 0; r < gpu.size() && !total.empty(); ++r) {
                const auto e =
                    rank_difference(layer, lp, lowered, o, o.summed_partial, gpu[r][s], ref[r][s]);
                if (e.size() != total.size()) total.clear();
                for (std::size_t i = 0; i < e.size() && !total.empty(); ++i) total[i] += e[i];
              }
              it = made.emplace(f.name, std::pair{std::move(total), std::move(m)}).first;
            }
            magnitude = it->second.second;
            return it->second.first;
          };
          for (std::size_t r = 0; r < ref.size(); ++r)
            compare_rank(report, layer, lp, lowered, gpu[r][s], ref[r][s], static_cast<int>(r), s,
                         where, summed);
        }
        compare_float64(report, layer, lp, gpu, data, options.tokens, where);
      });
  return report;
}

cpu::VerifyReport verify_rank_on_gpu(const Spec& spec, const cpu::VerifyOptions& options,
                                     const Device& device, const Jit& jit,
                                     DeviceCommunicator& comm) {
  cpu::VerifyReport report;
  device.make_current();
  const int me = comm.rank();
  for_each_layer(
      spec, options, static_cast<std::uint32_t>(comm.size()),
      [&](const Layer& layer, const LayerPlan& lp, const std::vector<cpu::LayerData>& data) {
        GpuRunOptions ge;
        ge.capture = bound_tensors(lp);
        ge.timeout = comm.timeout();
        const LoweredLayer lowered = lower_for_gpu(layer, lp, cublaslt_lower_options());
        const KernelSet kernels(jit, lowered.kernels);
        const auto mine = run_rank_on_gpu(kernels, comm, layer, lp, data, ge);
        // Every process runs the whole group's CPU reference (threads) with
        // every rank's GPU pre-activation (gathered over the communicator).
        std::vector<std::vector<cpu::RankStepResult>> gpu(static_cast<std::size_t>(comm.size()));
        Stream stream;
        const auto gather = [&](const std::vector<float>& local) {
          std::vector<float> all(local.size() * static_cast<std::size_t>(comm.size()));
          if (local.empty()) return all;
          DeviceBuffer send(local.size() * 4), recv(all.size() * 4);
          send.upload(local.data(), local.size() * 4);
          comm.all_gather(send.get(), recv.get(), local.size(), ElemType::fp32, stream.get());
          comm.synchronize(stream.get());
          recv.download(all.data(), all.size() * 4);
          return all;
        };
        for (std::size_t s = 0; s < data.size(); ++s) {
          const std::vector<float> z = gather(mine[s].z);
          for (int r = 0; r < comm.size(); ++r) {
            auto& g = gpu[static_cast<std::size_t>(r)];
            g.resize(data.size());
            const std::size_t n = mine[s].z.size();
            g[s].z.assign(z.begin() + static_cast<std::ptrdiff_t>(r * n),
                          z.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
          }
        }
        const auto ref = cpu::run_layer(layer, lp, data, reference_options(lp, options, gpu));
        const std::string where = " (" + std::string(comm.backend_name()) + ", " +
                                  std::to_string(comm.size()) + " processes)";
        for (std::size_t s = 0; s < data.size(); ++s) {
          std::vector<const cpu::RankStepResult*> cpu_ranks;
          for (const auto& r : ref) cpu_ranks.push_back(&r[s]);
          // A summed field's difference: this rank's own, summed over the
          // group by an all-gather (every process computes its own).
          const auto summed = [&](const Field&, const cpu::OutputOrigin& o,
                                  std::vector<double>& magnitude) {
            magnitude = partial_magnitude(lp, o, cpu_ranks);
            const auto e = rank_difference(layer, lp, lowered, o, o.summed_partial, mine[s],
                                           ref[static_cast<std::size_t>(me)][s]);
            std::vector<float> local(magnitude.size(), INFINITY);
            if (e.size() == local.size())
              for (std::size_t i = 0; i < e.size(); ++i)
                local[i] = static_cast<float>(e[i] * (1 + 0x1p-22));
            const std::vector<float> all = gather(local);
            std::vector<double> total(local.size(), 0.0);
            for (std::size_t i = 0; i < all.size(); ++i) total[i % local.size()] += all[i];
            return total;
          };
          compare_rank(report, layer, lp, lowered, mine[s], ref[static_cast<std::size_t>(me)][s],
                       me, s, where, summed);
        }
      });
  return report;
}

}  // namespace fp8c::runtime
