#include "codegen/kernels/plan_kernels.hpp"

#include <algorithm>
#include <string_view>

namespace fp8c {
namespace {

bool is_high_precision(ElemType t) {
  return t == ElemType::bf16 || t == ElemType::fp16 || t == ElemType::fp32;
}

void add(PlanKernels& into, const GeneratedKernel& k, std::string use) {
  for (auto& p : into.kernels) {
    if (p.kernel == k) {
      p.used_by.push_back(std::move(use));
      return;
    }
  }
  into.kernels.push_back({k, {std::move(use)}});
}

// The FP8 format an amax (or its reduced copy, "<t>.amax.reduced") scales:
// that of the FP8 tensor "<t>.fp8.row" or "<t>.fp8.col" of the same layer.
Fp8Format amax_format(const LayerPlan& plan, const Tensor& amax, const Layer& layer) {
  std::string base = amax.name;
  base = base.substr(0, base.find(".amax"));
  for (const char* usage : {".fp8.row", ".fp8.col"})
    if (const Tensor* t = plan.find(base + usage))
      return t->type == ElemType::e5m2 ? Fp8Format::e5m2 : Fp8Format::e4m3;
  return layer.recipe.forward;
}

// A scale_update step: one kernel for all of the step's tensors.
ScaleUpdateKernel scale_update_kernel(const LayerPlan& plan, const Step& s, const Layer& layer) {
  ScaleUpdateKernel k;
  for (int id : s.inputs) k.formats.push_back(amax_format(plan, plan.tensor(id), layer));
  k.history_length = layer.recipe.history;
  k.margin = static_cast<int>(layer.recipe.margin);
  k.rule = layer.recipe.amax;
  k.scale_stride = 4;  // the GPU executor's state layout (runtime/gpu/layer_state.hpp)
  return k;
}

// A tensor's name without the layer prefix and without the ".2", ".3" the
// planner appends to a repeated name: "z", "y.amax", ... (the executor's key).
std::string key(const LayerPlan& plan, const Tensor& t) {
  std::string k = t.name.substr(std::min(t.name.size(), plan.layer.size() + 1));
  const auto dot = k.rfind('.');
  if (dot != std::string::npos && dot + 1 < k.size() &&
      k.find_first_not_of("0123456789", dot + 1) == std::string::npos)
    k.resize(dot);
  return k;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// An epilogue step, as runtime/cpu's executor reads it: backward when it
// fuses dact or dbias (v = dy * act'(z), db), else forward (bias,
// activation, z saved, y in its type or FP8 with an amax).
EpilogueKernel epilogue_kernel(const LayerPlan& plan, const Step& s, const Layer& layer) {
  EpilogueKernel k;
  k.input = plan.tensor(s.inputs.at(0)).type;
  k.output = k.input;
  if (s.fused_dact || s.fused_dbias) {
    k.backward = true;
    k.activation = s.fused_dact ? layer.activation : Activation::none;
    k.dbias = s.fused_dbias;
    return k;
  }
  k.bias = s.bias;
  k.activation = layer.activation;
  for (int id : s.outputs) {
    const Tensor& t = plan.tensor(id);
    const std::string k_name = key(plan, t);
    if (k_name == "z")
      k.store_pre = true;
    else if (ends_with(k_name, ".amax"))
      k.amax = true;
    else
      k.output = t.type;
  }
  return k;
}

// A dequantize step: the FP8 operand (its usage, scaling and format) into a
// rowwise high-precision tensor.
DequantizeKernel dequantize_kernel(const LayerPlan& plan, const Step& s) {
  const Tensor& q = plan.tensor(s.inputs.at(0));
  DequantizeKernel k;
  k.format = q.type == ElemType::e5m2 ? Fp8Format::e5m2 : Fp8Format::e4m3;
  k.scaling = q.scaling;
  k.output = plan.tensor(s.outputs.at(0)).type;
  k.transpose = q.usage == Usage::columnwise;
  k.amax = s.stats;
  return k;
}

}  // namespace

StepKernels kernels_for_step(const LayerPlan& plan, const Step& s, const Layer& layer) {
  StepKernels out;
  switch (s.kind) {
    case StepKind::transpose:
      out.kernels.push_back({TransposeKernel{}});
      return out;
    case StepKind::permute:
      // The data and, for block scaling, its segmented scales.
      for (int id : s.inputs)
        out.kernels.push_back(
            {PermuteKernel{static_cast<int>(element_bytes(plan.tensor(id).type))}});
      return out;
    case StepKind::scale_update:
      out.kernels.push_back({scale_update_kernel(plan, s, layer)});
      return out;
    case StepKind::epilogue:
      out.kernels.push_back({epilogue_kernel(plan, s, layer)});
      return out;
    case StepKind::dequantize:
      out.kernels.push_back({dequantize_kernel(plan, s)});
      return out;
    case StepKind::quantize:
    case StepKind::amax:
      break;
    default:
      return out;
  }
  const Tensor& src = plan.tensor(s.inputs.at(0));
  if (!is_high_precision(src.type)) return out;
  QuantizeKernel k;
  k.input = src.type;
  k.dact = s.fused_dact ? layer.activation : Activation::none;
  if (s.kind == StepKind::amax) {
    k.rowwise = false;
    k.amax = true;
    out.kernels.push_back({k});
    return out;
  }
  const Tensor* fp8 = nullptr;
  for (int id : s.outputs)
    if (plan.tensor(id).is_fp8()) fp8 = &plan.tensor(id);
  if (!fp8) return out;
  if (fp8->scaling != Scaling::per_tensor) {
    // Block and MX formats: each usage from high precision with its own
    // scales. The block kernels fuse no dact or dbias yet: an epilogue
    // kernel makes dz = dy * act'(z) (and dbias) first, in fp32, and the
    // block kernel quantizes that (one more write and read of dz).
    if (s.fused_dact || s.fused_dbias) {
      EpilogueKernel e;
      e.input = src.type;
      e.output = ElemType::fp32;  // dz unrounded, as the fused CPU reference quantizes it
      e.backward = true;
      e.activation = s.fused_dact ? layer.activation : Activation::none;
      e.dbias = s.fused_dbias;
      out.kernels.push_back({e});
    }
    BlockQuantizeKernel b;
    b.input = s.fused_dact || s.fused_dbias ? ElemType::fp32 : src.type;
    b.format = fp8->type == ElemType::e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
    b.scaling = fp8->scaling;
    b.rowwise = s.rowwise;
    b.columnwise = s.columnwise;
    b.pow2 = layer.recipe.scale == ScaleForm::pow2 && fp8->scaling != Scaling::mx_1x32;
    out.kernels.push_back({b});
    return out;
  }
  k.format = fp8->type == ElemType::e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
  k.rowwise = s.rowwise;
  k.columnwise = s.columnwise;
  k.amax = s.fused_amax;
  k.dbias = s.fused_dbias;
  k.scale_from_amax = layer.recipe.kind == RecipeKind::current;
  k.pow2_scale = k.scale_from_amax && layer.recipe.scale == ScaleForm::pow2;
  out.kernels.push_back({k});
  return out;
}

void collect_kernels(const LayerPlan& plan, const Layer& layer, PlanKernels& into) {
  const auto walk = [&](const std::vector<Step>& steps, const char* pass) {
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i];
      const std::string use = plan.layer + " " + pass + " step " + std::to_string(i) + " (" +
                              std::string(to_string(s.kind)) + " " +
                              (s.inputs.empty() ? "" : plan.tensor(s.inputs[0]).name) + ")";
      const StepKernels k = kernels_for_step(plan, s, layer);
      if (k.not_generated)
        into.not_generated.push_back(k.why.empty() ? use : use + " [" + k.why + "]");
      for (const auto& g : k.kernels) add(into, g, use);
    }
  };
  walk(plan.forward, "forward");
  walk(plan.backward, "backward");
  walk(plan.update, "update");
}

std::string GeneratedKernel::name() const {
  return std::visit([](const auto& k) { return k.name(); }, description);
}

KernelSource emit_cuda(const GeneratedKernel& kernel) {
  return std::visit([](const auto& k) { return emit_cuda(k); }, kernel.description);
}

PlanKernels kernels_for(const Plan& plan, const Spec& spec) {
  PlanKernels out;
  for (const auto& layer_plan : plan.layers)
    if (const Layer* layer = spec.find_layer(layer_plan.layer))
      collect_kernels(layer_plan, *layer, out);
  return out;
}

}  // namespace fp8c
