// `fp8c plan --lowered`: per layer and pass, each plan step and what runs
// for it: kernel launches (role, kernel), GEMM calls, collectives.
#include <sstream>

#include "codegen/lower/lowered.hpp"
#include "codegen/plan/overloaded.hpp"

namespace fp8c {
namespace {

std::string describe(const GemmCall& g, std::uint32_t ranks) {
  std::string s = "gemm " + std::string(to_string(g.role)) + " on " + g.backend + ", ";
  switch (g.operands) {
    case GemmCall::Operands::fp8:
      s += "FP8 operands";
      break;
    case GemmCall::Operands::high_precision:
      s += "high-precision operands";
      break;
    case GemmCall::Operands::dequantized:
      s += "dequantized operands";
      break;
  }
  if (g.bias) s += ", +bias";
  if (g.activation != Activation::none) s += ", +" + std::string(to_string(g.activation));
  if (g.fp8_output) s += ", FP8 output with amax";
  if (g.activation_after) s += ", writes the pre-activation";
  if (g.columnwise_output) s += ", and its columnwise copy";
  if (g.dact != Activation::none) s += ", dact " + std::string(to_string(g.dact));
  if (g.dbias) s += ", dbias";
  if (g.segments > 1) s += ", " + std::to_string(g.segments) + " K segments (accumulating)";
  if (g.pad_scales_a || g.pad_scales_b)
    s += std::string(", 128x128 scales of ") + (g.pad_scales_a ? "A" : "B") + " padded";
  const std::string n = std::to_string(ranks);
  switch (g.ring) {
    case RingForm::none:
      break;
    case RingForm::gather_rows:
      s += ", ring of step " + std::to_string(g.ring_collective) + ": " + n +
           " row chunks, each as its rank segment arrives";
      break;
    case RingForm::gather_k:
      s += ", ring of step " + std::to_string(g.ring_collective) + ": the " + n +
           " K segments in the order they arrive";
      break;
    case RingForm::scatter_rows:
      s += ", ring of step " + std::to_string(g.ring_collective) + ": " + n +
           " row chunks, each added to the running sum from the previous rank and sent on";
      break;
  }
  return s;
}

void print_pass(std::ostringstream& o, const LayerPlan& lp, const char* name,
                const std::vector<Step>& steps, const std::vector<LoweredStep>& lowered,
                bool weight_cache, const std::vector<int>& order = {}) {
  if (steps.empty()) return;
  o << "  " << name << ":\n";
  bool reordered = false;
  for (std::size_t i = 0; i < order.size(); ++i)
    reordered = reordered || order[i] != static_cast<int>(i);
  if (reordered) {
    o << "    issued in the order";
    for (int i : order) o << " " << i;
    o << " (every step after the steps it reads, writes or overwrites)\n";
  }
  for (std::size_t i = 0; i < steps.size() && i < lowered.size(); ++i) {
    const std::vector<int> in = steps[i].inputs();
    o << "    " << i << ". " << to_string(steps[i].kind())
      << (in.empty() ? "" : " " + lp.tensor(in[0]).name)
      << (weight_cache && lowered[i].weight_only ? " (weight only: skipped while cached)" : "")
      << (lowered[i].on_side_stream ? " [side stream]" : "") << "\n";
    for (const auto& action : lowered[i].actions)
      std::visit(
          Overloaded{
              [&](const KernelLaunch& k) {
                o << "         launch " << k.kernel.name() << " (" << to_string(k.role) << ")\n";
              },
              [&](const GemmCall& g) { o << "         " << describe(g, lp.ranks) << "\n"; },
              [&](const CollectiveCall& c) {
                o << "         collective " << to_string(c.kind);
                if (c.ring_gemm >= 0)
                  o << " as a ring of " << lp.ranks - 1 << (lp.ranks == 2 ? " shift" : " shifts")
                    << " to the next rank, run "
                    << "by step " << c.ring_gemm << " on the "
                    << (c.on_comm_stream ? "communication" : "main") << " stream\n";
                else
                  o << " on the " << (c.on_comm_stream ? "communication" : "main") << " stream\n";
              },
          },
          action);
  }
}

}  // namespace

std::string print_lowered(const Plan& plan, const LoweredPlan& lowered) {
  std::ostringstream o;
  o << "lowered: " << plan.tokens << " tokens\n";
  for (const LoweredLayer& l : lowered.layers) {
    const LayerPlan* lp = plan.find(l.layer);
    if (!lp) continue;
    o << "\nlayer " << l.layer << " (" << l.ranks << " rank" << (l.ranks == 1 ? "" : "s") << ")\n";
    for (const auto& n : l.notes) o << "  note: " << n << "\n";
    for (const auto& u : l.unsupported) o << "  unsupported: " << u << "\n";
    print_pass(o, *lp, "forward", lp->forward, l.forward, l.weight_cache, l.forward_order);
    print_pass(o, *lp, "backward", lp->backward, l.backward, l.weight_cache, l.backward_order);
    if (l.nan_verdict) {
      o << "  nan verdict (nan = error), before the update: amax of";
      for (const auto& w : l.nan_verdict->watched) o << " " << lp->tensor(w.source).name;
      o << (l.nan_verdict->all_reduce ? "; all_reduce max over the group" : "")
        << "; copied to the host; the scale update skips on NaN\n";
    }
    print_pass(o, *lp, "update", lp->update, l.update, l.weight_cache);
    if (l.staging.dz_fp32 || l.staging.dequantized || l.staging.block_scales)
      o << "  staging: dz (fp32) " << l.staging.dz_fp32 << " B, dequantized operands "
        << l.staging.dequantized << " B, block scales as cuBLASLt reads them "
        << l.staging.block_scales << " B\n";
    if (l.staging.gemm_output)
      o << "  staging: a dgrad's output before the producer's dz is made from it "
        << l.staging.gemm_output << " B\n";
    if (l.staging.ring_sums)
      o << "  staging: ring running sums (fp32, received + sent) " << l.staging.ring_sums << " B\n";
    o << "  kernels: " << l.kernels.size() << "\n";
  }
  o << "\nkernels to compile: " << lowered.kernels.size() << "\n";
  for (const auto& k : lowered.kernels) o << "  " << k.kernel.name() << "\n";
  return o.str();
}

}  // namespace fp8c
