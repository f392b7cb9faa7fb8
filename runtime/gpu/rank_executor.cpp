#include "runtime/gpu/rank_executor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

namespace fp8c::runtime {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A plan tensor named "<key>.scale_inv" with a repeat suffix is still a scale pair.
bool is_per_tensor_scale(const LayerPlan& plan, int id) {
  const Tensor& t = plan.tensor(id);
  return t.type == ElemType::fp32 && t.elements() == 1 &&
         ends_with(cpu::tensor_key(plan, id), ".scale_inv");
}

DType collective_dtype(ElemType t) {
  switch (t) {
    case ElemType::bf16:
      return DType::kBFloat16;
    case ElemType::fp16:
      return DType::kFloat16;
    case ElemType::fp32:
      return DType::kFloat32;
    default:
      throw ExecutorError("gpu executor: a sum over ranks of an FP8 tensor");
  }
}

const char* k_dim_name(GemmRole role) {
  return role == GemmRole::fprop ? "in" : role == GemmRole::dgrad ? "out" : "tokens";
}

std::size_t round_up(std::size_t v, std::size_t to) {
  return (v + to - 1) / to * to;
}

bool block_scaled(const Tensor& t) {
  return t.is_fp8() && t.scaling != Scaling::per_tensor && t.scaling != Scaling::none;
}

// cuBLASLt on Hopper reads 1x128 scales K-block-major and MX not at all;
// the quantize kernels write row-major block scales. Until they write
// cuBLASLt's order, block-scaled GEMMs run on dequantized operands.
bool needs_dequantized_operands(const LayerPlan& plan, const Step& s) {
  return s.kind == StepKind::gemm &&
         (block_scaled(plan.tensor(s.inputs[0])) || block_scaled(plan.tensor(s.inputs[1])));
}

// The layer dtype, so the GEMM writes its usual outputs: exact for MX and
// power-of-two block scales (an FP8 value times 2^k fits bf16 and fp16),
// otherwise one rounding of each operand (2^-9 relative in bf16), which the
// GPU-vs-CPU tolerance covers.
ElemType dequantized_type(const Tensor&, const Layer& layer) {
  return layer.dtype == fp8c::DType::bf16   ? ElemType::bf16
         : layer.dtype == fp8c::DType::fp16 ? ElemType::fp16
                                            : ElemType::fp32;
}

DequantizeKernel operand_dequantize_kernel(const Tensor& t, const Layer& layer) {
  DequantizeKernel k;
  k.format = t.type == ElemType::e5m2 ? Fp8Format::e5m2 : Fp8Format::e4m3;
  k.scaling = t.scaling;
  k.output = dequantized_type(t, layer);
  k.transpose = t.usage == Usage::columnwise;
  return k;
}

// cuBLASLt applies GELU itself; relu and silu run as a kernel after a GEMM
// that writes the pre-activation.
bool activation_after_gemm(const Step& s) {
  return s.kind == StepKind::gemm && s.role == GemmRole::fprop &&
         (s.activation == Activation::relu || s.activation == Activation::silu);
}

EpilogueKernel activation_kernel(const LayerPlan& plan, const Step& s) {
  EpilogueKernel k;
  k.activation = s.activation;
  for (int id : s.outputs) {
    const Tensor& t = plan.tensor(id);
    const std::string key = cpu::tensor_key(plan, id);
    if (key == "z") {
      k.input = t.type;
    } else if (key.size() > 5 && key.compare(key.size() - 5, 5, ".amax") == 0) {
      k.amax = true;
    } else {
      k.output = t.type;
      if (!t.is_fp8()) k.input = t.type;
    }
  }
  return k;
}

}  // namespace

void LayerKernels::merge(LayerKernels other) {
  for (auto& g : other.kernels)
    if (std::find(kernels.begin(), kernels.end(), g) == kernels.end())
      kernels.push_back(std::move(g));
  for (ElemType t : other.dbias_outputs)
    if (std::find(dbias_outputs.begin(), dbias_outputs.end(), t) == dbias_outputs.end())
      dbias_outputs.push_back(t);
}

LayerKernels layer_kernels(const Layer& layer, const LayerPlan& plan) {
  LayerKernels out;
  std::string missing;
  for (const auto* pass : {&plan.forward, &plan.backward, &plan.update}) {
    for (const Step& s : *pass) {
      StepKernels k = kernels_for_step(plan, s, layer);
      if (k.not_generated)
        missing += "\n  " + std::string(to_string(s.kind)) + " " +
                   (s.inputs.empty() ? "" : plan.tensor(s.inputs[0]).name) +
                   (k.why.empty() ? "" : " [" + k.why + "]");
      if (needs_dequantized_operands(plan, s))
        for (int i : {0, 1})
          k.kernels.push_back({operand_dequantize_kernel(plan.tensor(s.inputs[i]), layer)});
      if (activation_after_gemm(s)) k.kernels.push_back({activation_kernel(plan, s)});
      LayerKernels step;
      step.kernels = std::move(k.kernels);
      if ((s.kind == StepKind::quantize || s.kind == StepKind::epilogue) && s.fused_dbias)
        for (int id : s.outputs)
          if (cpu::tensor_key(plan, id) == "db") step.dbias_outputs.push_back(plan.tensor(id).type);
      out.merge(std::move(step));
    }
  }
  if (!missing.empty())
    throw ExecutorError("gpu executor: layer '" + layer.name +
                        "' has steps without a generated kernel yet:" + missing);
  // `nan = error` is checked on the amax of every quantized tensor: a step
  // that computes none (block formats) cannot be checked on the GPU yet.
  if (layer.recipe.nan == NanPolicy::error)
    for (const auto* pass : {&plan.forward, &plan.backward})
      for (const Step& s : *pass)
        if (s.kind == StepKind::quantize && !s.fused_amax &&
            layer.recipe.kind != RecipeKind::current)
          throw ExecutorError("gpu executor: layer '" + layer.name +
                              "': nan = error needs an amax of " + plan.tensor(s.inputs[0]).name +
                              ", which this recipe does not compute on the GPU yet");
  return out;
}

GpuRankExecutor::GpuRankExecutor(const Layer& layer, const LayerPlan& plan,
                                 const RankResources& resources, DeviceLayerState& state)
    : layer_(layer), plan_(plan), r_(resources), state_(state) {
  if (static_cast<std::uint32_t>(r_.comm.size()) != plan.ranks)
    throw ExecutorError("gpu executor: the plan of layer '" + layer.name + "' is for " +
                        std::to_string(plan.ranks) + " ranks, the communicator has " +
                        std::to_string(r_.comm.size()));
  for (const auto& [steps, kernels] :
       {std::pair{&plan.forward, &forward_kernels_}, std::pair{&plan.backward, &backward_kernels_},
        std::pair{&plan.update, &update_kernels_}})
    for (const Step& s : *steps) kernels->push_back(kernels_for_step(plan, s, layer));

  // The kernels take extents as int: refuse what does not fit, by name.
  for (const Tensor& t : plan.tensors)
    for (const Dim& d : t.dims)
      if (d.local > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
        throw ExecutorError("gpu executor: " + t.name + "'s dim '" + d.name + "' has " +
                            std::to_string(d.local) + " elements, more than the kernels index");

  // Lay out the arena: 256-byte aligned tensors; per-tensor scales as
  // (scale, inverse) pairs; delayed-scaling state as views.
  const std::size_t n = plan.tensors.size();
  addresses_.assign(n, 0);
  state_view_.assign(n, false);
  written_.assign(n, false);
  std::vector<std::size_t> offsets(n, 0);
  std::size_t total = 0;
  // The scale update's amax inputs ("x.amax.reduced", or "x.amax" on one
  // rank) are the state's amax array, in the state's order.
  for (const Step& s : plan.update)
    if (s.kind == StepKind::scale_update)
      for (std::size_t j = 0; j < s.inputs.size(); ++j) {
        const auto i = static_cast<std::size_t>(s.inputs[j]);
        addresses_[i] = state.amax(static_cast<int>(j));
        state_view_[i] = true;
      }
  for (const Tensor& t : plan.tensors) {
    const std::size_t i = static_cast<std::size_t>(t.id);
    if (state_view_[i]) continue;
    const std::string k = key(t.id);
    if ((is_per_tensor_scale(plan, t.id) && t.external) || ends_with(k, ".scale_inv.next")) {
      const std::string base =
          k.substr(0, k.rfind(ends_with(k, ".next") ? ".scale_inv.next" : ".scale_inv"));
      if (const int si = state.index(base); si >= 0) {
        addresses_[i] = state.scale(si);
        state_view_[i] = true;
        continue;
      }
    }
    std::size_t bytes = std::max<std::size_t>(t.bytes(), 4);
    if (is_per_tensor_scale(plan, t.id)) bytes = 32;  // scale at +0, inverse at +16
    offsets[i] = total;
    total += round_up(bytes, 256);
  }
  arena_ = DeviceBuffer(std::max<std::size_t>(total, 256));
  for (std::size_t i = 0; i < n; ++i)
    if (!state_view_[i]) addresses_[i] = arena_.get() + offsets[i];
  // Scale pairs not bound to state start as (1, 1), as the CPU executor's.
  const float one[5] = {1.0f, 0.0f, 0.0f, 0.0f, 1.0f};
  for (std::size_t i = 0; i < n; ++i)
    if (!state_view_[i] && is_per_tensor_scale(plan, static_cast<int>(i)))
      arena_.upload(one, sizeof one, offsets[i]);

  gathered_inner_ = cpu::gathered_inner_tensors(plan);
  // Scratch: dbias tile partials (plus room for a dequantize step's debug
  // amax), dequantized operands of fallback GEMMs.
  std::size_t partial = 16, operands = 0, staging = 0;
  for (const auto* pass : {&plan.forward, &plan.backward})
    for (const Step& s : *pass) {
      if ((s.kind == StepKind::quantize || s.kind == StepKind::epilogue) && s.fused_dbias) {
        const Tensor& src = plan.tensor(s.inputs[0]);
        const auto rows = static_cast<int>(src.dims[0].local);
        const int tiles = s.kind == StepKind::quantize ? QuantizeLauncher::tiles(rows)
                                                       : EpilogueLauncher::dbias_tiles(rows);
        partial = std::max<std::size_t>(
            partial, static_cast<std::size_t>(tiles) * src.dims[1].local * 4 + 16);
      }
      if (s.kind == StepKind::quantize && (s.fused_dact || s.fused_dbias)) {
        const Tensor& src = plan.tensor(s.inputs[0]);
        for (int id : s.outputs)
          if (block_scaled(plan.tensor(id))) {
            staging = std::max(staging, src.elements() * 4);  // dz in fp32
            // dbias partials of the epilogue kernel's tiles
            partial = std::max<std::size_t>(
                partial, static_cast<std::size_t>(
                             EpilogueLauncher::dbias_tiles(static_cast<int>(src.dims[0].local))) *
                                 src.dims[1].local * 4 +
                             16);
          }
      }
      if (needs_dequantized_operands(plan, s)) {
        std::size_t bytes = 0;
        for (int i : {0, 1}) {
          const Tensor& t = plan.tensor(s.inputs[i]);
          bytes += round_up(t.elements() * element_bytes(dequantized_type(t, layer)), 256);
        }
        operands = std::max(operands, bytes);
      }
    }
  scratch_ = DeviceBuffer(partial);
  if (operands) operand_scratch_ = DeviceBuffer(operands);
  if (staging) staging_ = DeviceBuffer(staging);
}

int GpuRankExecutor::find(std::string_view k) const {
  const Tensor* t = plan_.find(layer_.name + "." + std::string(k));
  return t ? t->id : -1;
}

CUdeviceptr GpuRankExecutor::address(std::string_view k) const {
  const int id = find(k);
  if (id < 0)
    throw ExecutorError("gpu executor: layer '" + layer_.name + "' has no tensor '" +
                        std::string(k) + "'");
  return at(id);
}

void GpuRankExecutor::bind(std::string_view k, CUdeviceptr data) {
  const int id = find(k);
  if (id < 0 || state_view_[static_cast<std::size_t>(id)])
    throw ExecutorError("gpu executor: layer '" + layer_.name + "': '" + std::string(k) +
                        "' is not a tensor the caller can provide");
  if (data == 0) throw ExecutorError("gpu executor: null device pointer for " + std::string(k));
  addresses_[static_cast<std::size_t>(id)] = data;
}

void GpuRankExecutor::upload_externals(const cpu::TensorStore& host) {
  for (const Tensor& t : plan_.tensors) {
    const auto i = static_cast<std::size_t>(t.id);
    if (!t.external || !host.written(t.id) || state_view_[i]) continue;
    const auto bytes = host.bytes(t.id);
    if (is_per_tensor_scale(plan_, t.id)) {
      // The store holds the scale; the pair needs its inverse beside it.
      float pair[5] = {0, 0, 0, 0, 0};
      std::memcpy(&pair[0], bytes.data(), 4);
      pair[4] = 1.0f / pair[0];
      FP8C_CU(driver().cuMemcpyHtoD(at(t.id), pair, sizeof pair));
    } else {
      FP8C_CU(driver().cuMemcpyHtoD(at(t.id), bytes.data(), bytes.size()));
    }
  }
}

GpuRankExecutor::Slot GpuRankExecutor::slot(int scale_tensor) const {
  const auto i = static_cast<std::size_t>(scale_tensor);
  if (state_view_[i]) {
    const std::string base = key(scale_tensor).substr(0, key(scale_tensor).rfind(".scale_inv"));
    const int si = state_.index(base);
    if (si < 0)
      throw std::logic_error("gpu executor: " + plan_.tensor(scale_tensor).name +
                             " is a state view without state");
    return {state_.scale(si), state_.scale_inv(si)};
  }
  return {at(scale_tensor), at(scale_tensor) + 16};
}

void GpuRankExecutor::zero(CUdeviceptr p, std::size_t bytes) {
  FP8C_CU(driver().cuMemsetD8Async(p, 0, bytes, r_.stream));
}

void GpuRankExecutor::forward() {
  run_pass("forward", plan_.forward, forward_kernels_);
}
void GpuRankExecutor::backward() {
  run_pass("backward", plan_.backward, backward_kernels_);
}

void GpuRankExecutor::update() {
  // Only `nan = error` needs the amaxes on the host before the update.
  if (layer_.recipe.nan == NanPolicy::error) {
    synchronize();
    check_nan();
  }
  run_pass("update", plan_.update, update_kernels_);
}

void GpuRankExecutor::run_gemms_only() {
  run_pass("forward", plan_.forward, forward_kernels_, true);
  run_pass("backward", plan_.backward, backward_kernels_, true);
}

void GpuRankExecutor::synchronize() {
  r_.comm.synchronize(r_.stream);
}

void GpuRankExecutor::check_nan() {
  if (layer_.recipe.nan != NanPolicy::error) return;
  // This rank's verdict: the first quantized tensor whose amax is NaN.
  std::string culprit;
  for (const auto* pass : {&plan_.forward, &plan_.backward})
    for (const Step& s : *pass) {
      if (s.kind != StepKind::quantize && s.kind != StepKind::amax) continue;
      for (int id : s.outputs) {
        if (!ends_with(key(id), ".amax") || !culprit.empty()) continue;
        float v = 0;
        FP8C_CU(driver().cuMemcpyDtoH(&v, at(id), 4));
        if (std::isnan(v)) culprit = plan_.tensor(s.inputs[0]).name;
      }
    }
  // The group's verdict: every rank fails the step, or none does, so no
  // rank goes on into the update's collectives alone (and no rank's state
  // takes a NaN another rank refused).
  float flag = culprit.empty() ? 0.0f : 1.0f;
  if (r_.comm.size() > 1) {
    const CUdeviceptr d = scratch_.get() + scratch_.bytes() - 8;
    FP8C_CU(driver().cuMemcpyHtoD(d, &flag, 4));
    r_.comm.all_reduce(d, d, 1, DType::kFloat32, ReduceOp::kMax, r_.stream);
    r_.comm.synchronize(r_.stream);
    FP8C_CU(driver().cuMemcpyDtoH(&flag, d, 4));
  }
  if (flag != 0.0f)
    throw ExecutorError("gpu executor: layer '" + layer_.name + "': NaN in " +
                        (culprit.empty() ? std::string("a tensor on another rank") : culprit) +
                        " (recipe nan = error); the step is not applied");
}

void GpuRankExecutor::run_pass(const char* pass, const std::vector<Step>& steps,
                               const std::vector<StepKernels>& kernels, bool gemms_only) {
  const CUstream main = r_.stream;
  const bool split = overlapped();
  const DriverApi& cu = driver();
  if (split) {
    // The pass's collectives start after everything before the pass.
    if (!fork_) fork_ = std::make_unique<Event>(), join_ = std::make_unique<Event>();
    fork_->record(main);
    FP8C_CU(cu.cuStreamWaitEvent(r_.comm_stream, fork_->get(), 0));
    while (step_events_.size() < steps.size()) step_events_.push_back(std::make_unique<Event>());
    producer_.assign(plan_.tensors.size(), -1);
    produced_on_comm_.assign(plan_.tensors.size(), false);
  }
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    if (gemms_only && s.kind != StepKind::gemm) continue;
    if (skip_collectives_ && is_collective(s.kind)) continue;
    const bool on_comm = split && is_collective(s.kind);
    r_.stream = on_comm ? r_.comm_stream : main;
    if (split)
      for (int id : s.inputs) {
        const int from = producer_[static_cast<std::size_t>(id)];
        if (from >= 0 && produced_on_comm_[static_cast<std::size_t>(id)] != on_comm)
          FP8C_CU(cu.cuStreamWaitEvent(r_.stream,
                                       step_events_[static_cast<std::size_t>(from)]->get(), 0));
      }
    if (profiler_) {
      // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on
      // "literal" + std::string temporaries.
      std::string label = layer_.name;
      ((label += ' ') += pass) += ' ';
      (label += std::to_string(i)) += ' ';
      label += to_string(s.kind);
      if (s.kind == StepKind::gemm) (label += ' ') += to_string(s.role);
      if (!s.inputs.empty()) (label += ' ') += plan_.tensor(s.inputs[0]).name;
      profiler_->begin(label, s.kind, r_.stream);
    }
    try {
      execute(s, kernels[i]);
    } catch (...) {
      r_.stream = main;
      if (split) {
        // Whatever the pass already enqueued on the comm stream finishes
        // before anything after it on the main stream (and before buffers go).
        join_->record(r_.comm_stream);
        cu.cuStreamWaitEvent(main, join_->get(), 0);
      }
      throw;
    }
    if (profiler_) profiler_->end(r_.stream);
    if (split) {
      step_events_[i]->record(r_.stream);
      for (int id : s.outputs) {
        producer_[static_cast<std::size_t>(id)] = static_cast<int>(i);
        produced_on_comm_[static_cast<std::size_t>(id)] = on_comm;
      }
    }
    r_.stream = main;
    for (int id : s.outputs) written_[static_cast<std::size_t>(id)] = true;
  }
  if (split) {
    // Everything after the pass (the next pass, the caller) sees its
    // collectives done.
    join_->record(r_.comm_stream);
    FP8C_CU(cu.cuStreamWaitEvent(main, join_->get(), 0));
  }
}

void GpuRankExecutor::execute(const Step& s, const StepKernels& k) {
  switch (s.kind) {
    case StepKind::amax:
      amax(s, k);
      return;
    case StepKind::quantize:
      quantize(s, k);
      return;
    case StepKind::transpose: {
      const Tensor& in = plan_.tensor(s.inputs[0]);
      r_.kernels.transpose().launch(at(in.id), at(s.outputs[0]), static_cast<int>(in.dims[0].local),
                                    static_cast<int>(in.dims[1].local), r_.stream);
      return;
    }
    case StepKind::permute:
      permute(s, k);
      return;
    case StepKind::gemm:
      gemm(s);
      return;
    case StepKind::scale_update:
      scale_update(s, k);
      return;
    case StepKind::amax_all_reduce:
    case StepKind::all_gather:
    case StepKind::reduce_scatter:
    case StepKind::all_reduce:
      collective(s);
      return;
    case StepKind::epilogue:
      epilogue(s, k);
      return;
    case StepKind::dequantize:
      dequantize(s, k);
      return;
  }
  throw std::logic_error("gpu executor: a step kind it does not know");
}

void GpuRankExecutor::epilogue(const Step& s, const StepKernels& k) {
  const auto& d = std::get<EpilogueKernel>(k.kernels.at(0).description);
  const Tensor& in = plan_.tensor(s.inputs[0]);
  EpilogueArgs a;
  a.x = at(in.id);
  a.rows = static_cast<int>(in.dims[0].local);
  a.cols = static_cast<int>(in.dims[1].local);
  CUdeviceptr dbias = 0;
  ElemType dbias_type = ElemType::fp32;
  if (d.backward) {
    if (s.fused_dact) a.pre_activation = at(s.inputs[1]);
  } else {
    for (std::size_t i = 1; i < s.inputs.size(); ++i) {
      const int id = s.inputs[i];
      if (key(id) == "b")
        a.bias = at(id);
      else if (is_per_tensor_scale(plan_, id))
        a.scale = slot(id).scale;
    }
  }
  for (int id : s.outputs) {
    const std::string kk = key(id);
    if (kk == "z") {
      a.pre_activation_out = at(id);
    } else if (ends_with(kk, ".amax")) {
      a.amax = at(id);
      zero(a.amax, 4);
    } else if (kk == "db") {
      dbias = at(id);
      dbias_type = plan_.tensor(id).type;
      a.dbias_partial = scratch_.get();
    } else {
      a.out = at(id);
    }
  }
  r_.kernels.epilogue(d).launch(a, r_.stream);
  if (dbias)
    r_.kernels.dbias_reduce(dbias_type)
        .launch(dbias, scratch_.get(), EpilogueLauncher::dbias_tiles(a.rows), a.cols, r_.stream);
}

DequantizeArgs GpuRankExecutor::dequantize_args(int id, CUdeviceptr out) const {
  const Tensor& t = plan_.tensor(id);
  DequantizeArgs a;
  a.data = at(id);
  if (t.scaling == Scaling::per_tensor)
    a.tensor_scale = slot(t.scale).scale;
  else
    a.block_scales = at(t.scale);
  a.out = out;
  a.outer = static_cast<int>(t.dims[static_cast<std::size_t>(t.outer_dim())].local);
  a.inner = static_cast<int>(t.dims[static_cast<std::size_t>(t.inner_dim())].local);
  a.segments = gathered_inner_[static_cast<std::size_t>(id)] ? r_.comm.size() : 1;
  a.segmented = t.segmented.has_value();
  return a;
}

CUdeviceptr GpuRankExecutor::dequantized(int id, CUdeviceptr into) {
  r_.kernels.dequantize(operand_dequantize_kernel(plan_.tensor(id), layer_))
      .launch(dequantize_args(id, into), r_.stream);
  return into;
}

void GpuRankExecutor::dequantize(const Step& s, const StepKernels& k) {
  const auto& d = std::get<DequantizeKernel>(k.kernels.at(0).description);
  DequantizeArgs a = dequantize_args(s.inputs[0], at(s.outputs[0]));
  if (d.amax) {
    a.amax = scratch_.get() + scratch_.bytes() - 4;
    zero(a.amax, 4);
  }
  r_.kernels.dequantize(d).launch(a, r_.stream);
}

void GpuRankExecutor::dequantized_gemm(const Step& s, GemmArgs g) {
  const std::string k_name = k_dim_name(s.role);
  CUdeviceptr next = operand_scratch_.get();
  const auto hp_operand = [&](int id) {
    const Tensor& t = plan_.tensor(id);
    GemmOperand op;
    op.type = dequantized_type(t, layer_);
    op.data = dequantized(id, next);
    next += round_up(t.elements() * element_bytes(op.type), 256);
    // Dequantized into logical order [dims[0]][dims[1]].
    if (t.dims[1].name == k_name) {
      op.rows = static_cast<std::int64_t>(t.dims[0].local);
      op.k = static_cast<std::int64_t>(t.dims[1].local);
      op.ld = op.k;
    } else {
      op.k_outer = true;
      op.rows = static_cast<std::int64_t>(t.dims[1].local);
      op.k = static_cast<std::int64_t>(t.dims[0].local);
      op.ld = op.rows;
    }
    return op;
  };
  g.a = hp_operand(s.inputs[0]);
  g.b = hp_operand(s.inputs[1]);
  if (g.a.type != g.b.type) {  // one fp32 operand: both fp32 is the only form cuBLASLt takes
    throw ExecutorError("gpu executor: layer '" + layer_.name +
                        "': dequantized GEMM operands of different types");
  }
  std::string why;
  if (!r_.gemm.supports(g, &why))
    throw ExecutorError("gpu executor: layer '" + layer_.name +
                        "': " + std::string(to_string(s.role)) +
                        " GEMM on dequantized operands is not "
                        "supported by " +
                        std::string(r_.gemm.name()) + ": " + why);
  run_gemm(s, g);
}

void GpuRankExecutor::amax(const Step& s, const StepKernels& k) {
  const auto& launcher = r_.kernels.quantize(std::get<QuantizeKernel>(k.kernels.at(0).description));
  const Tensor& src = plan_.tensor(s.inputs[0]);
  QuantizeArgs a;
  a.x = at(src.id);
  if (s.fused_dact) a.pre_activation = at(s.inputs[1]);
  a.scale = arena_.get();  // not read by an amax-only kernel
  a.amax_out = at(s.outputs[0]);
  a.rows = static_cast<int>(src.dims[0].local);
  a.cols = static_cast<int>(src.dims[1].local);
  zero(a.amax_out, 4);
  launcher.launch(a, r_.stream);
}

void GpuRankExecutor::quantize(const Step& s, const StepKernels& k) {
  if (k.kernels.empty()) return;  // nothing to quantize (an FP8 input)
  const Tensor& src = plan_.tensor(s.inputs[0]);
  const int rows = static_cast<int>(src.dims[0].local);
  const int cols = static_cast<int>(src.dims[1].local);
  const auto& description = k.kernels.back().description;
  if (const auto* b = std::get_if<BlockQuantizeKernel>(&description)) {
    BlockQuantizeArgs a;
    a.x = at(src.id);
    if (k.kernels.size() == 2) {
      // Unfused dact / dbias: dz into staging first, then quantize that.
      EpilogueArgs e;
      e.x = at(src.id);
      e.rows = rows;
      e.cols = cols;
      if (s.fused_dact) e.pre_activation = at(s.inputs[1]);
      e.out = staging_.get();
      CUdeviceptr dbias = 0;
      ElemType dbias_type = ElemType::fp32;
      for (int id : s.outputs)
        if (key(id) == "db") {
          dbias = at(id);
          dbias_type = plan_.tensor(id).type;
        }
      if (dbias) e.dbias_partial = scratch_.get();
      r_.kernels.epilogue(std::get<EpilogueKernel>(k.kernels[0].description)).launch(e, r_.stream);
      if (dbias)
        r_.kernels.dbias_reduce(dbias_type)
            .launch(dbias, scratch_.get(), EpilogueLauncher::dbias_tiles(rows), cols, r_.stream);
      a.x = staging_.get();
    }
    a.rows = rows;
    a.cols = cols;
    for (int id : s.outputs) {
      const Tensor& t = plan_.tensor(id);
      if (!t.is_fp8()) continue;
      (t.usage == Usage::rowwise ? a.rowwise : a.columnwise) = at(id);
      (t.usage == Usage::rowwise ? a.rowwise_scales : a.columnwise_scales) = at(t.scale);
    }
    r_.kernels.block_quantize(*b).launch(a, r_.stream);
    return;
  }
  const auto& q = std::get<QuantizeKernel>(description);
  QuantizeArgs a;
  a.x = at(src.id);
  a.rows = rows;
  a.cols = cols;
  const std::size_t first_extra = s.fused_dact ? 2 : 1;
  if (s.fused_dact) a.pre_activation = at(s.inputs[1]);
  if (s.inputs.size() > first_extra) {
    const int in = s.inputs[first_extra];
    if (q.scale_from_amax)
      a.amax_in = at(in);
    else
      a.scale = slot(in).scale;
  }
  CUdeviceptr dbias = 0;
  ElemType dbias_type = ElemType::fp32;
  for (int id : s.outputs) {
    const Tensor& t = plan_.tensor(id);
    const std::string kk = key(id);
    if (t.is_fp8()) {
      (t.usage == Usage::rowwise ? a.rowwise : a.columnwise) = at(id);
    } else if (ends_with(kk, ".amax")) {
      a.amax_out = at(id);
      zero(a.amax_out, 4);
    } else if (kk == "db") {
      dbias = at(id);
      dbias_type = t.type;
      a.dbias_partial = scratch_.get();
    } else if (is_per_tensor_scale(plan_, id)) {
      a.scale_out = at(id);
    }
  }
  r_.kernels.quantize(q).launch(a, r_.stream);
  if (dbias)
    r_.kernels.dbias_reduce(dbias_type)
        .launch(dbias, scratch_.get(), QuantizeLauncher::tiles(rows), cols, r_.stream);
}

void GpuRankExecutor::permute(const Step& s, const StepKernels& k) {
  const int ranks = r_.comm.size();
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    const Tensor& t = plan_.tensor(s.inputs[i]);
    const auto outer = t.dims[static_cast<std::size_t>(t.outer_dim())].local;
    const auto inner = t.dims[static_cast<std::size_t>(t.inner_dim())].local;
    r_.kernels.permute(std::get<PermuteKernel>(k.kernels.at(i).description))
        .launch(at(t.id), at(s.outputs[i]), ranks, static_cast<int>(outer),
                static_cast<std::int64_t>(inner / static_cast<std::uint64_t>(ranks)), r_.stream);
  }
}

void GpuRankExecutor::collective(const Step& s) {
  auto& comm = r_.comm;
  switch (s.kind) {
    case StepKind::amax_all_reduce:
      comm.all_reduce(at(s.inputs[0]), at(s.outputs[0]), 1, DType::kFloat32, ReduceOp::kMax,
                      r_.stream);
      return;
    case StepKind::all_gather:
      // Raw bytes: rank i's block lands at i * its size (outermost dim).
      for (std::size_t i = 0; i < s.inputs.size(); ++i)
        comm.all_gather(at(s.inputs[i]), at(s.outputs[i]), plan_.tensor(s.inputs[i]).bytes(),
                        DType::kUInt8, r_.stream);
      return;
    case StepKind::reduce_scatter:
    case StepKind::all_reduce: {
      const Tensor& in = plan_.tensor(s.inputs[0]);
      const Tensor& out = plan_.tensor(s.outputs[0]);
      const DType dt = collective_dtype(in.type);
      if (s.kind == StepKind::reduce_scatter)
        comm.reduce_scatter(at(in.id), at(out.id), out.elements(), dt, ReduceOp::kSum, r_.stream);
      else
        comm.all_reduce(at(in.id), at(out.id), out.elements(), dt, ReduceOp::kSum, r_.stream);
      return;
    }
    default:
      throw std::logic_error("gpu executor: not a collective");
  }
}

void GpuRankExecutor::scale_update(const Step& s, const StepKernels& k) {
  // The amax inputs are the state's amax array (views), in the state's order.
  for (std::size_t i = 0; i < s.inputs.size(); ++i)
    if (at(s.inputs[i]) != state_.amax(static_cast<int>(i)))
      throw ExecutorError("gpu executor: layer '" + layer_.name +
                          "': the scale update's tensors are not in the state's order");
  ScaleUpdateArgs a;
  a.history = state_.history();
  a.amax = state_.amax();
  a.previous_scale = state_.scale();
  a.scale = state_.scale();
  a.scale_inv = state_.scale_inv();
  r_.kernels.scale_update(std::get<ScaleUpdateKernel>(k.kernels.at(0).description))
      .launch(a, r_.stream);
}

GemmOperand GpuRankExecutor::operand(int id, const std::string& k_name) const {
  const Tensor& t = plan_.tensor(id);
  GemmOperand op;
  op.data = at(id);
  op.type = t.type;
  op.scaling = t.scaling;
  const Dim& outer = t.dims[static_cast<std::size_t>(t.outer_dim())];
  const Dim& inner = t.dims[static_cast<std::size_t>(t.inner_dim())];
  if (inner.name == k_name) {
    op.rows = static_cast<std::int64_t>(outer.local);
    op.k = static_cast<std::int64_t>(inner.local);
    op.ld = op.k;
  } else if (outer.name == k_name && !t.is_fp8()) {
    op.k_outer = true;
    op.rows = static_cast<std::int64_t>(inner.local);
    op.k = static_cast<std::int64_t>(outer.local);
    op.ld = op.rows;
  } else {
    throw ExecutorError("gpu executor: GEMM operand " + t.name + " does not have '" + k_name +
                        "' innermost");
  }
  if (t.scaling == Scaling::per_tensor)
    op.scale_inv = slot(t.scale).inverse;
  else if (t.scaling != Scaling::none)
    op.scale_inv = at(t.scale);
  return op;
}

namespace {

std::string describe(const GemmArgs& g) {
  const auto op = [](const GemmOperand& o) {
    return std::string(to_string(o.type)) + " [" + std::to_string(o.rows) + " x " +
           std::to_string(o.k) + (o.k_outer ? ", K outer" : "") + ", ld " + std::to_string(o.ld) +
           ", " + std::string(to_string(o.scaling)) + "]";
  };
  return "A " + op(g.a) + ", B " + op(g.b) + ", D " + std::string(to_string(g.d_type)) + " ld " +
         std::to_string(g.ldd) + (g.bias ? ", bias" : "") +
         (g.activation != Activation::none ? ", activation" : "") + (g.aux ? ", aux" : "") +
         (g.accumulate ? ", accumulate" : "") + (g.d_amax ? ", amax" : "");
}

}  // namespace

void GpuRankExecutor::run_gemm(const Step& s, const GemmArgs& g) {
  try {
    r_.gemm.run(g, r_.stream);
  } catch (const std::exception& e) {
    throw ExecutorError("gpu executor: layer '" + layer_.name +
                        "': " + std::string(to_string(s.role)) + " GEMM (" + describe(g) +
                        "): " + e.what());
  }
}

void GpuRankExecutor::gemm(const Step& s) {
  const std::string k_name = k_dim_name(s.role);
  GemmOperand a = operand(s.inputs[0], k_name);
  GemmOperand b = operand(s.inputs[1], k_name);
  const Tensor& ta = plan_.tensor(s.inputs[0]);
  const Tensor& tb = plan_.tensor(s.inputs[1]);
  GemmArgs g;
  // Outputs: D (y, y.partial, dx, dw, ...), the pre-activation z, an FP8 y
  // with its amax.
  for (int id : s.outputs) {
    const Tensor& t = plan_.tensor(id);
    const std::string kk = key(id);
    if (kk == "z") {
      g.aux = at(id);
      g.aux_type = t.type;
      g.ld_aux = static_cast<std::int64_t>(t.dims[1].local);
    } else if (ends_with(kk, ".amax")) {
      g.d_amax = at(id);
      zero(g.d_amax, 4);
    } else {
      g.d = at(id);
      g.d_type = t.type;
      g.ldd = static_cast<std::int64_t>(t.dims[1].local);
    }
  }
  for (std::size_t i = 2; i < s.inputs.size(); ++i) {
    const int id = s.inputs[i];
    const std::string kk = key(id);
    if (kk == "b") {
      g.bias = at(id);
      g.bias_type = plan_.tensor(id).type;
    } else if (is_per_tensor_scale(plan_, id)) {
      g.d_scale = slot(id).scale;
    }
  }
  if (s.role == GemmRole::fprop) g.activation = s.activation;
  g.accumulate = s.accumulate;

  // relu / silu: the GEMM writes the pre-activation z (bias included), a
  // kernel makes y (and its FP8 cast and amax) from it.
  std::optional<EpilogueArgs> after;
  if (activation_after_gemm(s)) {
    EpilogueArgs e;
    e.rows = static_cast<int>(ta.dims[0].local);
    e.out = g.d;
    e.scale = g.d_scale;
    e.amax = g.d_amax;
    if (!g.aux) throw ExecutorError("gpu executor: an activation GEMM without its z output");
    e.x = g.aux;
    e.cols = static_cast<int>(g.ld_aux);
    g.d = g.aux;
    g.d_type = g.aux_type;
    g.ldd = g.ld_aux;
    g.aux = 0;
    g.d_scale = 0;
    g.d_amax = 0;
    g.activation = Activation::none;
    after = e;
  }
  const auto finish = [&] {
    if (after) r_.kernels.epilogue(activation_kernel(plan_, s)).launch(*after, r_.stream);
  };
  if (needs_dequantized_operands(plan_, s)) {
    dequantized_gemm(s, g);
    finish();
    return;
  }

  // A segmented operand ([ranks][rows][k / ranks], gathered along K) is
  // read one rank segment at a time, accumulating into D.
  const Tensor* seg = ta.segmented ? &ta : tb.segmented ? &tb : nullptr;
  const bool seg_on_k = seg &&
                        seg->dims[static_cast<std::size_t>(*seg->segmented)].name == k_name &&
                        !a.k_outer && !b.k_outer;
  if (!seg_on_k) {
    g.a = a;
    g.b = b;
    std::string why;
    if (!r_.gemm.supports(g, &why))
      throw ExecutorError("gpu executor: layer '" + layer_.name +
                          "': " + std::string(to_string(s.role)) + " GEMM of " + ta.name + " and " +
                          tb.name + " is not supported by " + std::string(r_.gemm.name()) + ": " +
                          why);
    run_gemm(s, g);
    finish();
    return;
  }
  if (g.bias || g.activation != Activation::none || g.aux || g.d_amax)
    throw ExecutorError(
        "gpu executor: a segmented-K GEMM with an epilogue (bias, activation, "
        "amax) is not supported: it would apply per segment");
  if (seg->scaling != Scaling::per_tensor && seg->scaling != Scaling::none)
    throw ExecutorError("gpu executor: a segmented-K GEMM of block-scaled " + seg->name +
                        " is not supported yet");
  const std::int64_t ranks = r_.comm.size();
  const std::int64_t k_seg = a.k / ranks;
  for (std::int64_t r = 0; r < ranks; ++r) {
    const auto view = [&](GemmOperand op, const Tensor& t) {
      const std::size_t elem = element_bytes(t.type);
      if (t.segmented) {  // segment r is its own [rows][k_seg] matrix
        op.data += static_cast<CUdeviceptr>(r * op.rows * k_seg) * elem;
        op.ld = k_seg;
      } else {  // columns [r * k_seg, (r + 1) * k_seg) of a [rows][k] matrix
        op.data += static_cast<CUdeviceptr>(r * k_seg) * elem;
      }
      op.k = k_seg;
      return op;
    };
    g.a = view(a, ta);
    g.b = view(b, tb);
    g.accumulate = s.accumulate || r > 0;
    std::string why;
    if (!r_.gemm.supports(g, &why))
      throw ExecutorError("gpu executor: layer '" + layer_.name + "': segmented-K " +
                          std::string(to_string(s.role)) + " GEMM is not supported by " +
                          std::string(r_.gemm.name()) + ": " + why);
    run_gemm(s, g);
  }
  finish();
}

void GpuRankExecutor::download(cpu::TensorStore& host) const {
  for (const Tensor& t : plan_.tensors) {
    const auto i = static_cast<std::size_t>(t.id);
    if (!written_[i] && !t.external) continue;
    auto bytes = host.bytes(t.id);
    if (bytes.empty()) continue;
    FP8C_CU(driver().cuMemcpyDtoH(bytes.data(), at(t.id), bytes.size()));
    host.mark_written(t.id);
  }
}

}  // namespace fp8c::runtime
