#include "runtime/gpu/gpu_verify.hpp"

#include <cmath>
#include <cstring>
#include <optional>

#include "codegen/plan/planner.hpp"
#include "runtime/cpu/reference.hpp"
#include "runtime/gpu/kernel_set.hpp"
#include "runtime/gpu/rank_executor.hpp"
#include "runtime/gpu/run_layer.hpp"

namespace fp8c::runtime {
namespace {

cpu::CheckResult compare(const std::string& layer, const std::string& check,
                         const std::vector<float>& gpu, const std::vector<float>& ref,
                         double tolerance, bool bitwise) {
  cpu::CheckResult c;
  c.layer = layer;
  c.check = check;
  c.tolerance = tolerance;
  c.bitwise = bitwise;
  if (gpu.size() != ref.size()) {
    c.max_abs = INFINITY;
    c.rel = INFINITY;
    c.check +=
        " (sizes differ: " + std::to_string(gpu.size()) + " vs " + std::to_string(ref.size()) + ")";
    return c;
  }
  double diff = 0, norm = 0;
  bool same_bits = true;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const double d = double(gpu[i]) - double(ref[i]);
    if (std::isnan(gpu[i]) != std::isnan(ref[i])) same_bits = false;
    if (!std::isnan(d)) {
      c.max_abs = std::max(c.max_abs, std::fabs(d));
      diff += d * d;
      norm += double(ref[i]) * double(ref[i]);
    }
    if (std::memcmp(&gpu[i], &ref[i], 4) != 0) same_bits = false;
  }
  c.rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  c.pass = bitwise ? same_bits : c.rel <= tolerance;
  if (!bitwise) {
    // NaN where the reference has none (or the reverse) is never within tolerance.
    for (std::size_t i = 0; i < gpu.size() && c.pass; ++i)
      if (std::isnan(gpu[i]) != std::isnan(ref[i])) c.pass = false;
  }
  return c;
}

// FP8 data and scales quantized straight from the step's inputs: the same
// kernels' arithmetic on both sides, so they must agree bit for bit.
std::vector<std::string> exact_tensors(const LayerPlan& plan) {
  std::vector<std::string> names;
  for (const Step& s : plan.forward) {
    if (s.kind != StepKind::quantize) continue;
    if (!plan.tensor(s.inputs[0]).external) continue;
    for (int id : s.outputs) {
      const Tensor& t = plan.tensor(id);
      if (t.is_fp8()) {
        names.push_back(t.name);
        if (t.scale >= 0 && t.scaling != Scaling::per_tensor)
          names.push_back(plan.tensor(t.scale).name);
      }
    }
  }
  return names;
}

std::vector<float> as_floats(const std::vector<std::uint8_t>& bytes) {
  std::vector<float> v(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) v[i] = bytes[i];
  return v;
}

}  // namespace

namespace {

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

// One rank's GPU results against the CPU reference's for the same rank.
void compare_rank(cpu::VerifyReport& report, const Layer& layer,
                  const std::vector<cpu::RankStepResult>& gpu,
                  const std::vector<cpu::RankStepResult>& ref, int rank, const std::string& where) {
  const double tol = cpu::tolerances().reduction;
  for (std::size_t s = 0; s < ref.size() && s < gpu.size(); ++s) {
    const auto& a = gpu[s];
    const auto& b = ref[s];
    const std::string at = " rank " + std::to_string(rank) + " step " + std::to_string(s);
    const auto add = [&](const std::string& what, const std::vector<float>& x,
                         const std::vector<float>& y, double bound, bool bitwise) {
      if (x.empty() && y.empty()) return;
      report.checks.push_back(
          compare(layer.name, what + ": gpu vs cpu" + at + where, x, y, bound, bitwise));
    };
    // y reads only FP8 data quantized from the inputs (bitwise equal,
    // checked below): the GEMMs' summation order is the only difference.
    // Gradients of a layer with an activation go through dz = dy * act'(z),
    // z a GEMM result: a z one rounding apart can move dz to the next FP8
    // code, so they get the rule the CPU oracle uses where quantized values
    // may differ (twice the float64 bound).
    const auto gradient_tol = [&](const char* t) {
      return layer.activation == Activation::none ? tol : 2 * cpu::float64_bound(layer, t);
    };
    add("y", a.y, b.y, tol, false);
    add("dx", a.dx, b.dx, gradient_tol("dx"), false);
    add("dw", a.dw, b.dw, gradient_tol("dw"), false);
    add("db", a.db, b.db, gradient_tol("db"), false);
    for (const auto& [name, c] : b.captured) {
      auto it = a.captured.find(name);
      add(name + " bytes",
          it == a.captured.end() ? std::vector<float>{} : as_floats(it->second.bytes),
          as_floats(c.bytes), 0, true);
    }
    for (const auto& [key, d] : b.state.delayed) {
      auto it = a.state.delayed.find(key);
      cpu::DelayedScale g = it == a.state.delayed.end() ? cpu::DelayedScale{} : it->second;
      const bool exact = key == "x" || key == "w";
      add("state " + key + " scale", {g.scale}, {d.scale}, tol, exact);
      add("state " + key + " history", g.history, d.history, tol, exact);
    }
  }
}

// The accuracy contract itself: the GPU's global tensors against the
// float64 reference of the unquantized math, within the bounds the CPU
// oracle holds its own runs to, and replicas identical on all ranks.
void compare_float64(cpu::VerifyReport& report, const Layer& layer,
                     const std::vector<std::vector<cpu::RankStepResult>>& gpu,
                     const std::vector<cpu::LayerData>& data, std::uint64_t tokens,
                     const std::string& where) {
  for (std::size_t s = 0; s < data.size(); ++s) {
    const cpu::ReferenceResult ref = cpu::reference_layer_step(layer, tokens, data[s]);
    std::vector<const cpu::RankStepResult*> ranks;
    for (const auto& r : gpu) ranks.push_back(&r[s]);
    struct Field {
      const char* name;
      std::vector<float> cpu::RankStepResult::*values;
      std::array<Dim, 2> cpu::RankStepResult::*dims;
      const std::vector<double>* ref;
    };
    std::vector<Field> fields = {
        {"y", &cpu::RankStepResult::y, &cpu::RankStepResult::y_dims, &ref.y},
        {"dx", &cpu::RankStepResult::dx, &cpu::RankStepResult::dx_dims, &ref.dx},
        {"dw", &cpu::RankStepResult::dw, &cpu::RankStepResult::dw_dims, &ref.dw}};
    if (layer.bias)
      fields.push_back({"db", &cpu::RankStepResult::db, &cpu::RankStepResult::db_dims, &ref.db});
    for (const auto& f : fields) {
      const cpu::Assembled g = cpu::assemble(ranks, f.values, f.dims);
      const std::vector<float> want(f.ref->begin(), f.ref->end());
      report.checks.push_back(compare(
          layer.name, std::string(f.name) + ": gpu vs float64 step " + std::to_string(s) + where,
          g.values, want, cpu::float64_bound(layer, f.name), false));
      report.checks.push_back(compare(layer.name,
                                      std::string(f.name) + ": replicas identical on all ranks" +
                                          " step " + std::to_string(s) + where,
                                      {g.replicas_agree ? 1.0f : 0.0f}, {1.0f}, 0, true));
    }
  }
}

// Calls body(layer, its plan, its data, the CPU executor's options) for each
// layer verify was asked for, planned for `ranks`.
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
    const LayerPlan& lp = *plan.find(layer.name);
    cpu::ExecutorOptions ce = options.executor;
    ce.backend = collectives::Backend::kInProcess;
    ce.capture = exact_tensors(lp);
    body(layer, lp, layer_data(layer, li, options), ce);
  }
}

}  // namespace

cpu::VerifyReport verify_spec_on_gpu(const Spec& spec, const cpu::VerifyOptions& options,
                                     const Device& device, const Jit& jit) {
  cpu::VerifyReport report;
  for_each_layer(spec, options, options.ranks,
                 [&](const Layer& layer, const LayerPlan& lp,
                     const std::vector<cpu::LayerData>& data, const cpu::ExecutorOptions& ce) {
                   GpuRunOptions ge;
                   ge.capture = ce.capture;
                   ge.timeout = ce.timeout;
                   const auto ref = cpu::run_layer(layer, lp, data, ce);
                   const auto gpu = run_layer_on_gpu(device, jit, layer, lp, data, ge);
                   const std::string where = " (" + std::to_string(lp.ranks) + " ranks on one GPU)";
                   for (std::size_t r = 0; r < ref.size(); ++r)
                     compare_rank(report, layer, gpu[r], ref[r], static_cast<int>(r), where);
                   compare_float64(report, layer, gpu, data, options.tokens, where);
                 });
  return report;
}

cpu::VerifyReport verify_rank_on_gpu(const Spec& spec, const cpu::VerifyOptions& options,
                                     const Device& device, const Jit& jit,
                                     DeviceCommunicator& comm) {
  cpu::VerifyReport report;
  device.make_current();
  for_each_layer(spec, options, static_cast<std::uint32_t>(comm.size()),
                 [&](const Layer& layer, const LayerPlan& lp,
                     const std::vector<cpu::LayerData>& data, const cpu::ExecutorOptions& ce) {
                   GpuRunOptions ge;
                   ge.capture = ce.capture;
                   ge.timeout = comm.timeout();
                   const LayerKernels needed = layer_kernels(layer, lp);
                   const KernelSet kernels(jit, needed.kernels, needed.dbias_outputs);
                   const auto gpu = run_rank_on_gpu(kernels, comm, layer, lp, data, ge);
                   // Every process runs the whole group's CPU reference (threads) and
                   // checks its own rank against it.
                   const auto ref = cpu::run_layer(layer, lp, data, ce);
                   compare_rank(report, layer, gpu, ref[static_cast<std::size_t>(comm.rank())],
                                comm.rank(),
                                " (" + std::string(comm.backend_name()) + ", " +
                                    std::to_string(comm.size()) + " processes)");
                 });
  return report;
}

}  // namespace fp8c::runtime
