// Plan -> lowered layer: each typed step's launches, GEMM calls and
// collectives on the target's GEMM backend (lowered.hpp).
#include <algorithm>

#include "codegen/lower/lowered.hpp"
#include "codegen/plan/overloaded.hpp"

namespace fp8c {
namespace {

std::uint64_t round_up(std::uint64_t v, std::uint64_t to) {
  return (v + to - 1) / to * to;
}

class Lowering {
 public:
  Lowering(const Layer& layer, const LayerPlan& plan) : layer_(layer), plan_(plan) {
    out_.layer = plan.layer;
    out_.ranks = plan.ranks;
  }

  LoweredLayer run() {
    nan_verdict();
    lower_pass(plan_.forward, out_.forward);
    lower_pass(plan_.backward, out_.backward);
    lower_pass(plan_.update, out_.update);
    check_nan_policy();
    return std::move(out_);
  }

 private:
  const Tensor& t(int id) const { return plan_.tensor(id); }

  void launch(LoweredStep& step, LaunchRole role, GeneratedKernel k) {
    if (std::find(out_.kernels.begin(), out_.kernels.end(), k) == out_.kernels.end())
      out_.kernels.push_back(k);
    step.actions.push_back(KernelLaunch{role, std::move(k)});
  }

  void lower_pass(const std::vector<Step>& steps, std::vector<LoweredStep>& into) {
    for (const Step& s : steps) {
      LoweredStep l;
      std::visit(
          Overloaded{
              [&](const AmaxStep& a) { amax(l, a); },
              [&](const QuantizeStep& q) { quantize(l, q); },
              [&](const TransposeStep&) { launch(l, LaunchRole::transpose, {TransposeKernel{}}); },
              [&](const PermuteStep& p) { permute(l, p); },
              [&](const GemmStep& g) { gemm(l, g); },
              [&](const EpilogueStep& e) { epilogue(l, e); },
              [&](const GradEpilogueStep& e) { grad_epilogue(l, e); },
              [&](const ScaleUpdateStep& u) { scale_update(l, u); },
              [&](const auto&) {  // the collectives
                CollectiveCall c;
                c.kind = s.kind();
                c.on_comm_stream = layer_.layout.overlap != Overlap::none;
                l.actions.push_back(c);
              },
          },
          s.op);
      into.push_back(std::move(l));
    }
  }

  void amax(LoweredStep& l, const AmaxStep& a) {
    QuantizeKernel k;
    k.input = t(a.src).type;
    k.dact = a.dact;
    k.rowwise = false;
    k.amax = true;
    launch(l, LaunchRole::amax, {k});
  }

  void dbias_reduce(LoweredStep& l, int dbias) {
    launch(l, LaunchRole::dbias_reduce, {DbiasReduceKernel{t(dbias).type}});
  }

  void quantize(LoweredStep& l, const QuantizeStep& q) {
    const Tensor& src = t(q.src);
    const Tensor& fp8 = t(q.rowwise != kNoTensor ? q.rowwise : q.columnwise);
    if (fp8.scaling != Scaling::per_tensor) {
      // Block and MX formats: each usage from high precision with its own
      // scales. The block kernel fuses no dact or dbias: an epilogue kernel
      // makes dz = dy * act'(z) (and the dbias partials) first, in fp32, and
      // the block kernel quantizes that (one more write and read of dz).
      const bool staged = q.dact != Activation::none || q.dbias != kNoTensor;
      if (staged) {
        EpilogueKernel e;
        e.input = src.type;
        e.output = ElemType::fp32;  // dz unrounded, as the fused CPU reference quantizes it
        e.backward = true;
        e.activation = q.dact;
        e.dbias = q.dbias != kNoTensor;
        launch(l, LaunchRole::dact_to_staging, {e});
        if (q.dbias != kNoTensor) dbias_reduce(l, q.dbias);
        out_.staging.dz_fp32 = std::max(out_.staging.dz_fp32, src.elements() * 4);
      }
      BlockQuantizeKernel b;
      b.input = staged ? ElemType::fp32 : src.type;
      b.format = fp8.type;
      b.scaling = fp8.scaling;
      b.rowwise = q.rowwise != kNoTensor;
      b.columnwise = q.columnwise != kNoTensor;
      b.pow2 = q.pow2_scale;
      launch(l, LaunchRole::quantize, {b});
      return;
    }
    QuantizeKernel k;
    k.input = src.type;
    k.dact = q.dact;
    k.format = fp8.type;
    k.rowwise = q.rowwise != kNoTensor;
    k.columnwise = q.columnwise != kNoTensor;
    k.amax = q.amax != kNoTensor;
    k.dbias = q.dbias != kNoTensor;
    k.scale_from_amax = q.amax_in != kNoTensor;
    k.pow2_scale = k.scale_from_amax && q.pow2_scale;
    launch(l, LaunchRole::quantize, {k});
    if (q.dbias != kNoTensor) dbias_reduce(l, q.dbias);
  }

  void permute(LoweredStep& l, const PermuteStep& p) {
    launch(l, LaunchRole::permute_data,
           {PermuteKernel{static_cast<int>(element_bytes(t(p.in).type))}});
    if (p.scales_in != kNoTensor)
      launch(l, LaunchRole::permute_scales,
             {PermuteKernel{static_cast<int>(element_bytes(t(p.scales_in).type))}});
  }

  // The layer dtype: exact for MX and power-of-two block scales (an FP8
  // value times 2^k fits bf16 and fp16), otherwise one rounding of each
  // operand (2^-8 relative in bf16), which the GPU-vs-CPU bounds cover.
  DequantizeKernel operand_dequantize(const Tensor& op) const {
    DequantizeKernel k;
    k.format = op.type;
    k.scaling = op.scaling;
    k.output = layer_.dtype;
    k.transpose = op.usage == Usage::columnwise;
    return k;
  }

  void gemm(LoweredStep& l, const GemmStep& g) {
    GemmCall c;
    c.role = g.role;
    const Tensor& a = t(g.a);
    const Tensor& b = t(g.b);
    if (g.high_precision) {
      c.operands = GemmCall::Operands::high_precision;
    } else if (a.block_scaled() || b.block_scaled()) {
      // cuBLASLt on Hopper reads 1x128 scales K-block-major and MX not at
      // all; the quantize kernels write row-major block scales. Until they
      // feed its block-scaled GEMM, these GEMMs run on dequantized operands.
      c.operands = GemmCall::Operands::dequantized;
      launch(l, LaunchRole::dequantize_a, {operand_dequantize(a)});
      launch(l, LaunchRole::dequantize_b, {operand_dequantize(b)});
      const std::uint64_t bytes = element_bytes(layer_.dtype);
      out_.staging.dequantized =
          std::max(out_.staging.dequantized,
                   round_up(a.elements() * bytes, 256) + round_up(b.elements() * bytes, 256));
      note_once(std::string(to_string(g.role)) + ": " + std::string(to_string(a.scaling)) + " x " +
                std::string(to_string(b.scaling)) + " operands dequantized to " +
                std::string(to_string(layer_.dtype)) + " for a " + c.backend +
                " GEMM (its block-scaled GEMM does not read fp8c's "
                "row-major block scales yet)");
    }
    const OutputEpilogue& e = g.epilogue;
    c.bias = e.bias != kNoTensor;
    c.fp8_output = e.out_scale != kNoTensor;
    if (e.activation == Activation::relu || e.activation == Activation::silu) {
      c.activation_after = true;
      EpilogueKernel k;
      k.activation = e.activation;
      k.input = t(e.pre_activation).type;
      k.output = t(g.out).type;
      k.amax = e.out_amax != kNoTensor;
      launch(l, LaunchRole::activation_after_gemm, {k});
      note_once(std::string(to_string(e.activation)) + " is not a " + c.backend +
                " epilogue: the GEMM writes the pre-activation, a kernel applies it");
    } else {
      c.activation = e.activation;
    }
    const bool segmented = (a.segmented || b.segmented) && g.segmented_k;
    if (segmented) {
      c.segments = plan_.ranks;
      if (e.any())
        unsupported("a segmented-K " + std::string(to_string(g.role)) +
                    " GEMM with an epilogue (bias, activation, amax): it would apply per segment");
      if (c.operands == GemmCall::Operands::dequantized)
        c.segments = 1;  // the dequantize writes contiguous K
    }
    // Move the GEMM after the launches that prepare its operands, before
    // the one that finishes its output.
    std::vector<LoweredAction> before, after;
    for (auto& action : l.actions) {
      const auto* k = std::get_if<KernelLaunch>(&action);
      (k && k->role == LaunchRole::activation_after_gemm ? after : before).push_back(action);
    }
    before.push_back(c);
    before.insert(before.end(), after.begin(), after.end());
    l.actions = std::move(before);
  }

  EpilogueKernel output_epilogue(const OutputEpilogue& e, int in, int out) const {
    EpilogueKernel k;
    k.input = t(in).type;
    k.output = t(out).type;
    k.bias = e.bias != kNoTensor;
    k.activation = e.activation;
    k.store_pre = e.pre_activation != kNoTensor;
    k.amax = e.out_amax != kNoTensor;
    return k;
  }

  void epilogue(LoweredStep& l, const EpilogueStep& e) {
    launch(l, LaunchRole::epilogue, {output_epilogue(e.epilogue, e.in, e.out)});
  }

  void grad_epilogue(LoweredStep& l, const GradEpilogueStep& e) {
    EpilogueKernel k;
    k.input = t(e.dy).type;
    k.output = t(e.out).type;
    k.backward = true;
    k.activation = e.dact;
    k.dbias = e.dbias != kNoTensor;
    launch(l, LaunchRole::epilogue, {k});
    if (e.dbias != kNoTensor) dbias_reduce(l, e.dbias);
  }

  void scale_update(LoweredStep& l, const ScaleUpdateStep& u) {
    ScaleUpdateKernel k;
    for (const auto& e : u.entries)
      k.formats.push_back(plan_.delayed[static_cast<std::size_t>(e.state)].format);
    k.history_length = layer_.recipe.history;
    k.margin = static_cast<int>(layer_.recipe.margin);
    k.rule = layer_.recipe.amax;
    k.scale_stride = 4;  // the GPU executor's state layout (runtime/gpu/layer_state.hpp)
    if (out_.nan_verdict) k.guard = static_cast<int>(out_.nan_verdict->watched.size());
    launch(l, LaunchRole::scale_update, {k});
  }

  // The amaxes `nan = error` decides on: every quantize's and amax pass's.
  void nan_verdict() {
    if (layer_.recipe.nan != NanPolicy::error) return;
    NanVerdict v;
    for (const auto* pass : {&plan_.forward, &plan_.backward})
      for (const Step& s : *pass) {
        if (const auto* q = s.as<QuantizeStep>(); q && q->amax != kNoTensor)
          v.watched.push_back({q->amax, q->src});
        if (const auto* a = s.as<AmaxStep>(); a && a->amax != kNoTensor)
          v.watched.push_back({a->amax, a->src});
      }
    if (v.watched.empty()) return;
    v.all_reduce = plan_.ranks > 1;
    out_.nan_verdict = std::move(v);
  }

  // `nan = error` is decided on the amax of every quantized quantity: one
  // whose recipe computes none (block formats) cannot be checked yet.
  void check_nan_policy() {
    if (layer_.recipe.nan != NanPolicy::error) return;
    for (const auto* pass : {&plan_.forward, &plan_.backward})
      for (const Step& s : *pass)
        if (const auto* q = s.as<QuantizeStep>(); q && is_high_precision(t(q->src).type)) {
          const bool delayed_amax = [&] {
            for (const auto& d : plan_.delayed)
              if (d.scale == q->scale && d.amax != kNoTensor) return true;
            return false;
          }();
          if (q->amax_in == kNoTensor && !delayed_amax)
            unsupported("nan = error needs an amax of " + t(q->src).name +
                        ", which this recipe does not compute on the GPU yet");
        }
  }

  void note_once(const std::string& n) {
    if (std::find(out_.notes.begin(), out_.notes.end(), n) == out_.notes.end())
      out_.notes.push_back(n);
  }
  void unsupported(const std::string& why) {
    const std::string m = "layer '" + layer_.name + "': " + why;
    if (std::find(out_.unsupported.begin(), out_.unsupported.end(), m) == out_.unsupported.end())
      out_.unsupported.push_back(m);
  }

  const Layer& layer_;
  const LayerPlan& plan_;
  LoweredLayer out_;
};

}  // namespace

const std::vector<LoweredStep>& LoweredLayer::pass(std::string_view name) const {
  return name == "forward" ? forward : name == "backward" ? backward : update;
}

LoweredLayer lower_layer(const Layer& layer, const LayerPlan& plan) {
  return Lowering(layer, plan).run();
}

const LoweredLayer* LoweredPlan::find(std::string_view layer) const {
  for (const auto& l : layers)
    if (l.layer == layer) return &l;
  return nullptr;
}

std::vector<GeneratedKernel> LoweredPlan::kernel_list() const {
  std::vector<GeneratedKernel> v;
  for (const auto& k : kernels) v.push_back(k.kernel);
  return v;
}

LoweredPlan lower_plan(const Spec& spec, const Plan& plan) {
  LoweredPlan out;
  for (const LayerPlan& lp : plan.layers) {
    const Layer* layer = spec.find_layer(lp.layer);
    if (!layer) continue;
    LoweredLayer l = lower_layer(*layer, lp);
    const auto use = [&](const char* pass, const std::vector<Step>& steps,
                         const std::vector<LoweredStep>& lowered) {
      for (std::size_t i = 0; i < lowered.size(); ++i)
        for (const auto& action : lowered[i].actions) {
          const auto* k = std::get_if<KernelLaunch>(&action);
          if (!k) continue;
          const std::vector<int> in = steps[i].inputs();
          const std::string where = lp.layer + " " + pass + " step " + std::to_string(i) + " (" +
                                    std::string(to_string(steps[i].kind())) +
                                    (in.empty() ? "" : " " + lp.tensor(in[0]).name) + ")";
          auto it = std::find_if(out.kernels.begin(), out.kernels.end(),
                                 [&](const LoweredKernel& p) { return p.kernel == k->kernel; });
          if (it == out.kernels.end())
            out.kernels.push_back({k->kernel, {where}});
          else if (it->used_by.empty() || it->used_by.back() != where)
            it->used_by.push_back(where);
        }
    };
    use("forward", lp.forward, l.forward);
    use("backward", lp.backward, l.backward);
    use("update", lp.update, l.update);
    out.unsupported.insert(out.unsupported.end(), l.unsupported.begin(), l.unsupported.end());
    out.layers.push_back(std::move(l));
  }
  return out;
}

std::string_view to_string(LaunchRole r) {
  switch (r) {
    case LaunchRole::amax:
      return "amax";
    case LaunchRole::quantize:
      return "quantize";
    case LaunchRole::dact_to_staging:
      return "dact_to_staging";
    case LaunchRole::dbias_reduce:
      return "dbias_reduce";
    case LaunchRole::transpose:
      return "transpose";
    case LaunchRole::permute_data:
      return "permute_data";
    case LaunchRole::permute_scales:
      return "permute_scales";
    case LaunchRole::epilogue:
      return "epilogue";
    case LaunchRole::scale_update:
      return "scale_update";
    case LaunchRole::dequantize_a:
      return "dequantize_a";
    case LaunchRole::dequantize_b:
      return "dequantize_b";
    case LaunchRole::activation_after_gemm:
      return "activation_after_gemm";
  }
  return "?";
}

}  // namespace fp8c
