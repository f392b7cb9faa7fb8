#include "runtime/gpu/gpu_verify.hpp"

#include <cmath>
#include <cstring>

#include "codegen/planner.hpp"
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
    c.check += " (sizes differ: " + std::to_string(gpu.size()) + " vs " +
               std::to_string(ref.size()) + ")";
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

cpu::VerifyReport verify_spec_on_gpu(const Spec& spec, const cpu::VerifyOptions& options,
                                     const Device& device, const Jit& jit) {
  if (!options.layer.empty() && !spec.find_layer(options.layer))
    throw cpu::VerifyError("no layer '" + options.layer + "'");
  if (options.steps == 0) throw cpu::VerifyError("--steps must be at least 1");
  PlanOptions po;
  po.ranks = options.ranks;
  po.tokens = options.tokens;
  const Plan plan = plan_spec(spec, po);
  for (const Layer& layer : spec.layers) {
    if (!options.layer.empty() && layer.name != options.layer) continue;
    const double flops = cpu::layer_step_flops(layer, options.tokens);
    if (flops > options.max_flops && !options.force)
      throw cpu::VerifyError("layer '" + layer.name + "': one step is " + std::to_string(flops) +
                             " GEMM FLOPs for the CPU reference (limit " +
                             std::to_string(options.max_flops) +
                             " without --force); use fewer --tokens or pass --force");
  }
  const double tol = cpu::tolerances().reduction;
  cpu::VerifyReport report;
  for (std::size_t li = 0; li < spec.layers.size(); ++li) {
    const Layer& layer = spec.layers[li];
    if (!options.layer.empty() && layer.name != options.layer) continue;
    const LayerPlan& lp = *plan.find(layer.name);
    std::vector<cpu::LayerData> data;
    for (std::uint32_t s = 0; s < options.steps; ++s)
      data.push_back(
          cpu::random_layer_data(layer, options.tokens, options.seed * 1000003 + li * 7919 + s));
    cpu::ExecutorOptions ce = options.executor;
    ce.backend = collectives::Backend::kInProcess;
    ce.capture = exact_tensors(lp);
    GpuRunOptions ge;
    ge.capture = ce.capture;
    ge.timeout = ce.timeout;
    const auto ref = cpu::run_layer(layer, lp, data, ce);
    const auto gpu = run_layer_on_gpu(device, jit, layer, lp, data, ge);
    const std::string where = " (" + std::to_string(lp.ranks) + " ranks on one GPU)";
    for (std::size_t r = 0; r < ref.size(); ++r) {
      for (std::size_t s = 0; s < ref[r].size(); ++s) {
        const auto& a = gpu[r][s];
        const auto& b = ref[r][s];
        const std::string at = " rank " + std::to_string(r) + " step " + std::to_string(s);
        const auto add = [&](const std::string& what, const std::vector<float>& x,
                             const std::vector<float>& y, bool bitwise) {
          if (x.empty() && y.empty()) return;
          report.checks.push_back(
              compare(layer.name, what + ": gpu vs cpu" + at + where, x, y, tol, bitwise));
        };
        add("y", a.y, b.y, false);
        add("dx", a.dx, b.dx, false);
        add("dw", a.dw, b.dw, false);
        add("db", a.db, b.db, false);
        for (const auto& [name, c] : b.captured) {
          auto it = a.captured.find(name);
          add(name + " bytes", it == a.captured.end() ? std::vector<float>{}
                                                      : as_floats(it->second.bytes),
              as_floats(c.bytes), true);
        }
        for (const auto& [key, d] : b.state.delayed) {
          auto it = a.state.delayed.find(key);
          cpu::DelayedScale g = it == a.state.delayed.end() ? cpu::DelayedScale{} : it->second;
          const bool exact = key == "x" || key == "w";
          add("state " + key + " scale", {g.scale}, {d.scale}, exact);
          add("state " + key + " history", g.history, d.history, exact);
        }
      }
    }
  }
  return report;
}

}  // namespace fp8c::runtime
