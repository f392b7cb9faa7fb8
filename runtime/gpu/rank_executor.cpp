#include "runtime/gpu/rank_executor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

#include "codegen/lower/ring.hpp"
#include "codegen/plan/overloaded.hpp"

namespace fp8c::runtime {
namespace {

// The type of a tensor summed over ranks: high precision only.
ElemType summed_type(ElemType t) {
  if (!is_high_precision(t)) throw ExecutorError("gpu executor: a sum over ranks of an FP8 tensor");
  return t;
}

std::size_t round_up(std::size_t v, std::size_t to) {
  return (v + to - 1) / to * to;
}

// A per-tensor scale lives as a (scale, inverse) pair 16 bytes apart.
bool is_scale_pair(const Tensor& t) {
  return t.form == Form::scale || t.form == Form::next_scale;
}

template <typename K>
const K& launch_kernel(const LoweredStep& l, LaunchRole role) {
  const KernelLaunch* k = l.find_launch(role);
  if (!k)
    throw std::logic_error("gpu executor: the lowered step has no " + std::string(to_string(role)) +
                           " launch");
  return std::get<K>(k->kernel.description);
}

// The logical dim a GEMM operand contracts over (fprop K = in: dim 1 of both;
// dgrad K = out: dim 1 of dY, dim 0 of W; wgrad K = tokens: dim 0).
int k_dim(GemmRole role, int operand) {
  if (role == GemmRole::fprop) return 1;
  if (role == GemmRole::dgrad) return operand == 0 ? 1 : 0;
  return 0;
}

}  // namespace

LoweredLayer lower_for_gpu(const Layer& layer, const LayerPlan& plan, const LowerOptions& options) {
  LoweredLayer l = lower_layer(layer, plan, options);
  if (!l.unsupported.empty()) {
    std::string m = "gpu executor: layer '" + layer.name + "' cannot run on the GPU yet:";
    for (const auto& u : l.unsupported) m += "\n  " + u;
    throw ExecutorError(m);
  }
  return l;
}

GpuRankExecutor::GpuRankExecutor(const Layer& layer, const LayerPlan& plan,
                                 const LoweredLayer& lowered, const RankResources& resources,
                                 DeviceLayerState& state)
    : layer_(layer), plan_(plan), lowered_(lowered), r_(resources), state_(state) {
  if (static_cast<std::uint32_t>(r_.comm.size()) != plan.ranks)
    throw ExecutorError("gpu executor: the plan of layer '" + layer.name + "' is for " +
                        std::to_string(plan.ranks) + " ranks, the communicator has " +
                        std::to_string(r_.comm.size()));
  if (lowered.forward.size() != plan.forward.size() ||
      lowered.backward.size() != plan.backward.size() ||
      lowered.update.size() != plan.update.size())
    throw std::logic_error("gpu executor: the lowered layer is not this plan's");

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
  // The scale update's amax inputs are the state's amax array, its scales
  // the state's scales, in the state's order (DeviceLayerState).
  for (const DelayedTensor& d : plan.delayed) {
    const int si = state.index(d.key());
    if (si < 0) continue;
    if (d.amax_reduced != kNoTensor) {
      addresses_[static_cast<std::size_t>(d.amax_reduced)] = state.amax(si);
      state_view_[static_cast<std::size_t>(d.amax_reduced)] = true;
    }
    for (int id : {d.scale, d.next_scale}) {
      if (id == kNoTensor) continue;
      addresses_[static_cast<std::size_t>(id)] = state.scale(si);
      state_view_[static_cast<std::size_t>(id)] = true;
    }
  }
  for (const Tensor& t : plan.tensors) {
    const std::size_t i = static_cast<std::size_t>(t.id);
    if (state_view_[i]) continue;
    std::size_t bytes = std::max<std::size_t>(t.bytes(), 4);
    if (is_scale_pair(t)) bytes = 32;  // scale at +0, inverse at +16
    offsets[i] = total;
    total += round_up(bytes, 256);
  }
  arena_ = DeviceBuffer(std::max<std::size_t>(total, 256));
  for (std::size_t i = 0; i < n; ++i)
    if (!state_view_[i]) addresses_[i] = arena_.get() + offsets[i];
  // Scale pairs not bound to state start as (1, 1), as the CPU executor's.
  const float one[5] = {1.0f, 0.0f, 0.0f, 0.0f, 1.0f};
  for (std::size_t i = 0; i < n; ++i)
    if (!state_view_[i] && is_scale_pair(plan.tensors[i]))
      arena_.upload(one, sizeof one, offsets[i]);

  // Scratch: the dbias tile partials of the largest launch that makes them
  // (never empty, so that the buffer exists); then what the lowering says
  // it stages.
  std::size_t partial = 16;
  const auto partials = [&](const std::vector<Step>& steps, const std::vector<LoweredStep>& low) {
    for (std::size_t i = 0; i < steps.size(); ++i) {
      // A dgrad's dbias for its producer: the generated GEMM's workspace, or
      // the quantize kernel's partials after cuBLASLt, over its output.
      if (const auto* g = steps[i].as<GemmStep>(); g && g->epilogue.dbias != kNoTensor) {
        const Tensor& out = plan.tensor(g->out);
        const auto rows = static_cast<std::int64_t>(out.dims[0].local);
        const auto cols = static_cast<std::int64_t>(out.dims[1].local);
        partial = std::max(
            {partial, dbias_workspace_bytes(rows, cols),
             static_cast<std::size_t>(QuantizeLauncher::tiles(static_cast<int>(rows)) * cols * 4)});
        continue;
      }
      const std::vector<int> in = steps[i].inputs();
      if (in.empty() || !low[i].find_launch(LaunchRole::dbias_reduce)) continue;
      const Tensor& src = plan.tensor(in[0]);
      const auto rows = static_cast<int>(src.dims[0].local);
      const bool by_epilogue = low[i].find_launch(LaunchRole::dact_to_staging) ||
                               steps[i].kind() == StepKind::grad_epilogue;
      const int tiles =
          by_epilogue ? EpilogueLauncher::dbias_tiles(rows) : QuantizeLauncher::tiles(rows);
      partial =
          std::max<std::size_t>(partial, static_cast<std::size_t>(tiles) * src.dims[1].local * 4);
    }
  };
  partials(plan.forward, lowered.forward);
  partials(plan.backward, lowered.backward);
  scratch_ = DeviceBuffer(partial);
  if (lowered.nan_verdict) {
    const std::size_t n = lowered.nan_verdict->watched.size();
    verdict_ = DeviceBuffer(2 * n * 4);
    verdict_host_ = PinnedHostBuffer(2 * n * 4);
  }
  if (lowered.staging.dequantized) operand_scratch_ = DeviceBuffer(lowered.staging.dequantized);
  if (lowered.staging.block_scales) scale_scratch_ = DeviceBuffer(lowered.staging.block_scales);
  if (lowered.staging.dz_fp32) staging_ = DeviceBuffer(lowered.staging.dz_fp32);
  if (lowered.staging.ring_sums) ring_sums_ = DeviceBuffer(lowered.staging.ring_sums);
  if (lowered.staging.gemm_output) gemm_staging_ = DeviceBuffer(lowered.staging.gemm_output);
}

CUdeviceptr GpuRankExecutor::address(int id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= addresses_.size())
    throw ExecutorError("gpu executor: layer '" + layer_.name + "' has no tensor " +
                        std::to_string(id));
  return at(id);
}

void GpuRankExecutor::bind(int id, CUdeviceptr data) {
  if (id < 0 || static_cast<std::size_t>(id) >= addresses_.size() ||
      state_view_[static_cast<std::size_t>(id)])
    throw ExecutorError("gpu executor: layer '" + layer_.name +
                        "': not a tensor the caller can provide");
  if (data == 0)
    throw ExecutorError("gpu executor: null device pointer for " + plan_.tensor(id).name);
  addresses_[static_cast<std::size_t>(id)] = data;
}

void GpuRankExecutor::upload_externals(const cpu::TensorStore& host) {
  for (const Tensor& t : plan_.tensors) {
    const auto i = static_cast<std::size_t>(t.id);
    // A chained input's amax (the producer's) is the state's amax slot.
    if (!t.external || !host.written(t.id) || (state_view_[i] && t.form != Form::amax)) continue;
    const auto bytes = host.bytes(t.id);
    if (is_scale_pair(t)) {
      // The store holds the scale; the pair needs its inverse beside it.
      float pair[5] = {0, 0, 0, 0, 0};
      std::memcpy(&pair[0], bytes.data(), 4);
      pair[4] = 1.0f / pair[0];
      copy_to_device(at(t.id), pair, sizeof pair);
    } else {
      copy_to_device(at(t.id), bytes.data(), bytes.size());
    }
  }
}

void GpuRankExecutor::bind_scale(int id, ScalePair pair) {
  if (id < 0 || static_cast<std::size_t>(id) >= addresses_.size() ||
      state_view_[static_cast<std::size_t>(id)] || !is_scale_pair(plan_.tensor(id)))
    throw ExecutorError("gpu executor: layer '" + layer_.name +
                        "': not a scale the caller can provide");
  if (pair.scale == 0 || pair.inverse == 0 || pair.scale % 16 != 0 || pair.inverse % 16 != 0)
    throw ExecutorError("gpu executor: layer '" + layer_.name + "': the scale of " +
                        plan_.tensor(id).name + " must be two 16-byte aligned device addresses");
  bound_scales_.resize(addresses_.size());
  bound_scales_[static_cast<std::size_t>(id)] = pair;
}

GpuRankExecutor::Slot GpuRankExecutor::slot(int scale_tensor) const {
  const auto i = static_cast<std::size_t>(scale_tensor);
  if (i < bound_scales_.size() && bound_scales_[i].scale) return bound_scales_[i];
  if (i < weight_scale_.size() && weight_scale_[i].scale) return weight_scale_[i];
  if (state_view_[i]) return state_slot(scale_tensor);
  return {at(scale_tensor), at(scale_tensor) + 16};
}

GpuRankExecutor::Slot GpuRankExecutor::state_slot(int scale_tensor) const {
  const int d = plan_.delayed_index_of_scale(scale_tensor);
  const int si = d < 0 ? -1 : state_.index(plan_.delayed[static_cast<std::size_t>(d)].key());
  if (si < 0)
    throw std::logic_error("gpu executor: " + plan_.tensor(scale_tensor).name +
                           " is a state view without state");
  return {state_.scale(si), state_.scale_inv(si)};
}

void GpuRankExecutor::enable_weight_cache() {
  // A graph captured before would read the state's scale pair, not the
  // cache's, and a weight cast before would have no pair copied.
  if (passes_run_)
    throw std::logic_error("gpu executor: layer '" + layer_.name +
                           "': enable_weight_cache after a pass has run");
  std::vector<int> scales;
  for (const auto& [steps, lowered] : {std::pair{&plan_.forward, &lowered_.forward},
                                       std::pair{&plan_.backward, &lowered_.backward}})
    for (std::size_t i = 0; i < steps->size(); ++i)
      if (const auto* q = (*steps)[i].as<QuantizeStep>();
          q && (*lowered)[i].weight_only && q->scale != kNoTensor &&
          state_view_[static_cast<std::size_t>(q->scale)] &&
          std::find(scales.begin(), scales.end(), q->scale) == scales.end())
        scales.push_back(q->scale);
  weight_scale_.assign(addresses_.size(), ScalePair{});
  if (scales.empty()) return;
  weight_scales_ = DeviceBuffer(scales.size() * 32);
  std::vector<float> ones(scales.size() * 8, 0.0f);
  for (std::size_t k = 0; k < scales.size(); ++k) ones[k * 8] = ones[k * 8 + 4] = 1.0f;
  weight_scales_.upload(ones.data(), ones.size() * 4);
  for (std::size_t k = 0; k < scales.size(); ++k)
    weight_scale_[static_cast<std::size_t>(scales[k])] = {weight_scales_.get() + k * 32,
                                                          weight_scales_.get() + k * 32 + 16};
}

void GpuRankExecutor::set_weight_cached(bool cached) {
  if (cached && weight_scale_.empty())
    throw std::logic_error("gpu executor: set_weight_cached without enable_weight_cache");
  weight_cached_ = cached;
}

void GpuRankExecutor::zero(CUdeviceptr p, std::size_t bytes) {
  FP8C_CU(driver().cuMemsetD8Async(p, 0, bytes, r_.stream));
}

void GpuRankExecutor::forward() {
  check_nan_verdict();
  run_graph(forward_graph_, {&lowered_.forward},
            [&] { run_pass("forward", plan_.forward, lowered_.forward, lowered_.forward_order); });
}
void GpuRankExecutor::backward() {
  check_nan_verdict();
  run_pass("backward", plan_.backward, lowered_.backward, lowered_.backward_order);
}

void GpuRankExecutor::update() {
  check_nan_verdict();
  enqueue_nan_verdict();
  run_pass("update", plan_.update, lowered_.update, {});
  verdict_enqueued();
}

void GpuRankExecutor::backward_and_update() {
  check_nan_verdict();
  run_graph(backward_graph_, {&lowered_.backward, &lowered_.update}, [&] {
    run_pass("backward", plan_.backward, lowered_.backward, lowered_.backward_order);
    enqueue_nan_verdict();
    run_pass("update", plan_.update, lowered_.update, {});
  });
  verdict_enqueued();
}

namespace {

// Whether a lowered pass runs a collective (a NaN verdict agreed over ranks
// is one too: the caller adds it).
bool has_collective(const std::vector<LoweredStep>& pass) {
  for (const auto& l : pass)
    if (l.find<CollectiveCall>()) return true;
  return false;
}

}  // namespace

void GpuRankExecutor::run_graph(PassGraph& graph,
                                std::initializer_list<const std::vector<LoweredStep>*> passes,
                                const std::function<void()>& enqueue) {
  bool collectives = false;
  for (const auto* p : passes) collectives = collectives || has_collective(*p);
  if (&graph == &backward_graph_ && lowered_.nan_verdict && lowered_.nan_verdict->all_reduce)
    collectives = true;
  if (!graphs_ || profiler_ || skip_collectives_ || (collectives && !r_.comm.capturable())) {
    enqueue();
    ++graph_counts_.eager;
    return;
  }
  // What the captured launches take: the streams (a graph keeps the GEMM
  // workspace of the stream it was captured on: WorkspacePool), every
  // tensor's address and every scale bound from elsewhere (the arena and the
  // state do not move).
  std::vector<std::uint64_t> key = {
      reinterpret_cast<std::uint64_t>(r_.stream), reinterpret_cast<std::uint64_t>(r_.comm_stream),
      reinterpret_cast<std::uint64_t>(r_.side_stream), weight_cached_ ? 1u : 0u};
  key.insert(key.end(), addresses_.begin(), addresses_.end());
  for (const ScalePair& p : bound_scales_) {
    key.push_back(p.scale);
    key.push_back(p.inverse);
  }
  switch (graph.run(r_.stream, key, enqueue)) {
    case PassGraph::Outcome::eager:
      ++graph_counts_.eager;
      break;
    case PassGraph::Outcome::captured:
      ++graph_counts_.captured;
      break;
    case PassGraph::Outcome::replayed:
      ++graph_counts_.replayed;
      break;
  }
}

std::string GpuRankExecutor::graph_disabled(std::string_view pass) const {
  if (!graphs_) return "graphs are off";
  const bool forward = pass == "forward";
  if (!forward && pass != "backward")
    throw std::invalid_argument("gpu executor: no pass '" + std::string(pass) + "'");
  bool collectives = forward
                         ? has_collective(lowered_.forward)
                         : has_collective(lowered_.backward) || has_collective(lowered_.update) ||
                               (lowered_.nan_verdict && lowered_.nan_verdict->all_reduce);
  if (collectives && !r_.comm.capturable())
    return "its collectives run on the " + std::string(r_.comm.backend_name()) +
           " communicator, which cannot be captured";
  return (forward ? forward_graph_ : backward_graph_).disabled();
}

void GpuRankExecutor::run_gemms_only() {
  run_pass("forward", plan_.forward, lowered_.forward, lowered_.forward_order, true);
  run_pass("backward", plan_.backward, lowered_.backward, lowered_.backward_order, true);
}

void GpuRankExecutor::prepare_gemms() {
  struct Preparing {
    bool& flag;
    explicit Preparing(bool& f) : flag(f) { flag = true; }
    ~Preparing() { flag = false; }
  } preparing(preparing_);
  gemms_only_ = false;  // the GEMM calls as the passes make them (a ring's chunks)
  for (const auto& [steps, lowered] : {std::pair{&plan_.forward, &lowered_.forward},
                                       std::pair{&plan_.backward, &lowered_.backward}}) {
    pass_steps_ = steps;  // a ring GEMM finds its collective there
    for (std::size_t i = 0; i < steps->size(); ++i)
      if (const auto* g = (*steps)[i].as<GemmStep>()) {
        // cuBLASLt has nothing to ready (and its refusals stay the step's).
        const GemmCall* call = (*lowered)[i].find<GemmCall>();
        if (call && call->backend == "generated") gemm(*g, (*lowered)[i]);
      }
  }
}

void GpuRankExecutor::synchronize() {
  r_.comm.synchronize(r_.stream);
  check_nan_verdict();
}

// The watched amaxes side by side (local), their MAX over the group as
// bits (agreed), both copied to the host; the scale update reads `agreed`.
// Nothing here waits for the GPU.
void GpuRankExecutor::enqueue_nan_verdict() {
  if (!lowered_.nan_verdict) return;
  const auto& watched = lowered_.nan_verdict->watched;
  const std::size_t n = watched.size();
  const DriverApi& cu = driver();
  const CUdeviceptr local = verdict_.get(), agreed = verdict_.get() + n * 4;
  for (std::size_t i = 0; i < n; ++i)
    FP8C_CU(cu.cuMemcpyDtoDAsync(local + i * 4, at(watched[i].amax), 4, r_.stream));
  if (lowered_.nan_verdict->all_reduce)
    r_.comm.all_reduce(local, agreed, n, ElemType::i32, ReduceOp::kMax, r_.stream);
  else
    FP8C_CU(cu.cuMemcpyDtoDAsync(agreed, local, n * 4, r_.stream));
  FP8C_CU(cu.cuMemcpyDtoHAsync(verdict_host_.get(), local, 2 * n * 4, r_.stream));
}

// After the update pass is enqueued (by itself or as a graph's launch): the
// event the host waits on for the verdict. Recorded outside any capture, so
// that it marks this step's launch of the copy.
void GpuRankExecutor::verdict_enqueued() {
  if (!lowered_.nan_verdict) return;
  verdict_ready_.record(r_.stream);
  verdict_pending_ = true;
}

void GpuRankExecutor::check_nan_verdict() {
  if (!verdict_pending_) return;
  verdict_ready_.synchronize();
  verdict_pending_ = false;
  const auto& watched = lowered_.nan_verdict->watched;
  const std::size_t n = watched.size();
  const auto* values = static_cast<const float*>(verdict_host_.get());
  // This rank's culprit: the first watched tensor whose amax is NaN; the
  // group's verdict: any NaN in the agreed copy (every rank reads the same).
  std::string culprit;
  bool group = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (culprit.empty() && std::isnan(values[i])) culprit = plan_.tensor(watched[i].source).name;
    group = group || std::isnan(values[n + i]);
  }
  if (group || !culprit.empty())
    throw ExecutorError("gpu executor: layer '" + layer_.name + "': NaN in " +
                        (culprit.empty() ? std::string("a tensor on another rank") : culprit) +
                        " (recipe nan = error); the step's scale update was not applied");
}

void GpuRankExecutor::run_pass(const char* pass, const std::vector<Step>& steps,
                               const std::vector<LoweredStep>& lowered,
                               const std::vector<int>& order, bool gemms_only) {
  const CUstream main = r_.stream;
  pass_steps_ = &steps;
  gemms_only_ = gemms_only;
  ++passes_run_;
  // Each step's stream: the lowering's, where this executor was given it.
  const auto stream_of = [&](const LoweredStep& l) {
    if (const auto* c = l.find<CollectiveCall>(); c && c->on_comm_stream && r_.comm_stream)
      return r_.comm_stream;
    if (l.on_side_stream && r_.side_stream) return r_.side_stream;
    return main;
  };
  std::vector<CUstream> others;  // the streams besides main this pass uses
  for (const auto& l : lowered)
    if (const CUstream st = stream_of(l);
        st != main && std::find(others.begin(), others.end(), st) == others.end())
      others.push_back(st);
  const bool split = !others.empty();
  const DriverApi& cu = driver();
  if (split) {
    // The other streams start after everything before the pass.
    if (!fork_) fork_ = std::make_unique<Event>(), join_ = std::make_unique<Event>();
    fork_->record(main);
    for (const CUstream st : others) FP8C_CU(cu.cuStreamWaitEvent(st, fork_->get(), 0));
    while (step_events_.size() < steps.size()) step_events_.push_back(std::make_unique<Event>());
  }
  // Everything the pass enqueued on the other streams is done before what
  // comes after it on main (the next pass, the caller; buffers freed after
  // an error), and the executor's stream is main again, however the pass
  // ends: normally (join() below) or by an exception anywhere in it (the
  // guard, which must not throw in its turn).
  const auto join = [&] {
    for (const CUstream st : others) {
      join_->record(st);
      FP8C_CU(cu.cuStreamWaitEvent(main, join_->get(), 0));
    }
  };
  struct Ending {
    GpuRankExecutor& e;
    CUstream main;
    const std::function<void()> join;
    bool done = false;
    ~Ending() {
      e.r_.stream = main;
      if (done) return;
      try {
        join();
      } catch (...) {  // the pass's own error is the one that propagates
      }
    }
  } ending{*this, main, split ? std::function<void()>(join) : std::function<void()>([] {})};
  std::vector<bool> ran(steps.size(), false);
  std::vector<CUstream> ran_on(steps.size(), main);
  for (std::size_t n = 0; n < steps.size(); ++n) {
    const std::size_t i = order.empty() ? n : static_cast<std::size_t>(order[n]);
    const Step& s = steps[i];
    if (gemms_only && s.kind() != StepKind::gemm) continue;
    if (skip_collectives_ && s.is_collective()) continue;
    if (weight_cached_ && lowered[i].weight_only) continue;
    // A ring's collective runs inside its GEMM's step; its own step issues
    // nothing and nothing waits for it (the schedule gives it no hazards).
    if (lowered[i].ring_gemm() >= 0) {
      for (int id : s.outputs()) written_[static_cast<std::size_t>(id)] = true;
      continue;
    }
    r_.stream = stream_of(lowered[i]);
    // Wait for the steps it follows (LoweredStep::after) that ran on
    // another stream in this pass; those on its own are ordered already.
    if (split)
      for (int j : lowered[i].after) {
        const auto k = static_cast<std::size_t>(j);
        if (ran[k] && ran_on[k] != r_.stream)
          FP8C_CU(cu.cuStreamWaitEvent(r_.stream, step_events_[k]->get(), 0));
      }
    if (profiler_) {
      // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on
      // "literal" + std::string temporaries.
      std::string label = layer_.name;
      ((label += ' ') += pass) += ' ';
      (label += std::to_string(i)) += ' ';
      label += to_string(s.kind());
      if (const auto* g = s.as<GemmStep>()) (label += ' ') += to_string(g->role);
      const std::vector<int> in = s.inputs();
      if (!in.empty()) (label += ' ') += plan_.tensor(in[0]).name;
      profiler_->begin(label, s.kind(), r_.stream);
    }
    execute(s, lowered[i]);
    if (profiler_) profiler_->end(r_.stream);
    if (split) step_events_[i]->record(r_.stream);
    ran[i] = true;
    ran_on[i] = r_.stream;
    r_.stream = main;
    for (int id : s.outputs()) written_[static_cast<std::size_t>(id)] = true;
  }
  r_.stream = main;
  ending.done = true;
  if (split) join();
}

void GpuRankExecutor::execute(const Step& step, const LoweredStep& l) {
  std::visit(Overloaded{
                 [&](const AmaxStep& s) { amax(s, l); },
                 [&](const QuantizeStep& s) { quantize(s, l); },
                 [&](const TransposeStep& s) {
                   const Tensor& in = plan_.tensor(s.in);
                   r_.kernels.transpose(launch_kernel<TransposeKernel>(l, LaunchRole::transpose))
                       .launch(at(s.in), at(s.out), static_cast<int>(in.dims[0].local),
                               static_cast<int>(in.dims[1].local), r_.stream);
                 },
                 [&](const PermuteStep& s) { permute(s, l); },
                 [&](const GemmStep& s) { gemm(s, l); },
                 [&](const ScaleUpdateStep& s) { scale_update(s, l); },
                 [&](const EpilogueStep& s) { epilogue(s, l); },
                 [&](const GradEpilogueStep& s) { grad_epilogue(s, l); },
                 [&](const auto&) { collective(step); },
             },
             step.op);
}

void GpuRankExecutor::dbias_reduce(const LoweredStep& l, int dbias, int tiles, int cols) {
  const auto& k = launch_kernel<DbiasReduceKernel>(l, LaunchRole::dbias_reduce);
  r_.kernels.dbias_reduce(k).launch(at(dbias), scratch_.get(), tiles, cols, r_.stream);
}

void GpuRankExecutor::epilogue(const EpilogueStep& s, const LoweredStep& l) {
  const auto& d = launch_kernel<EpilogueKernel>(l, LaunchRole::epilogue);
  const Tensor& in = plan_.tensor(s.in);
  EpilogueArgs a;
  a.x = at(s.in);
  a.rows = static_cast<int>(in.dims[0].local);
  a.cols = static_cast<int>(in.dims[1].local);
  const OutputEpilogue& e = s.epilogue;
  if (e.bias != kNoTensor) a.bias = at(e.bias);
  if (e.out_scale != kNoTensor) a.scale = slot(e.out_scale).scale;
  if (e.pre_activation != kNoTensor) a.pre_activation_out = at(e.pre_activation);
  if (e.out_amax != kNoTensor) {
    a.amax = at(e.out_amax);
    zero(a.amax, 4);
  }
  a.out = at(s.out);
  r_.kernels.epilogue(d).launch(a, r_.stream);
}

void GpuRankExecutor::grad_epilogue(const GradEpilogueStep& s, const LoweredStep& l) {
  const auto& d = launch_kernel<EpilogueKernel>(l, LaunchRole::epilogue);
  const Tensor& in = plan_.tensor(s.dy);
  EpilogueArgs a;
  a.x = at(s.dy);
  a.rows = static_cast<int>(in.dims[0].local);
  a.cols = static_cast<int>(in.dims[1].local);
  if (s.pre_activation != kNoTensor) a.pre_activation = at(s.pre_activation);
  a.out = at(s.out);
  if (s.dbias != kNoTensor) a.dbias_partial = scratch_.get();
  r_.kernels.epilogue(d).launch(a, r_.stream);
  if (s.dbias != kNoTensor) dbias_reduce(l, s.dbias, EpilogueLauncher::dbias_tiles(a.rows), a.cols);
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
  a.segments = static_cast<int>(t.block_segments[static_cast<std::size_t>(t.inner_dim())]);
  a.segmented = t.segmented.has_value();
  return a;
}

void GpuRankExecutor::amax(const AmaxStep& s, const LoweredStep& l) {
  const auto& launcher = r_.kernels.quantize(launch_kernel<QuantizeKernel>(l, LaunchRole::amax));
  const Tensor& src = plan_.tensor(s.src);
  QuantizeArgs a;
  a.x = at(s.src);
  if (s.pre_activation != kNoTensor) a.pre_activation = at(s.pre_activation);
  a.scale = arena_.get();  // not read by an amax-only kernel
  a.amax_out = at(s.amax);
  a.rows = static_cast<int>(src.dims[0].local);
  a.cols = static_cast<int>(src.dims[1].local);
  zero(a.amax_out, 4);
  launcher.launch(a, r_.stream);
}

void GpuRankExecutor::quantize(const QuantizeStep& s, const LoweredStep& l) {
  const Tensor& src = plan_.tensor(s.src);
  const int rows = static_cast<int>(src.dims[0].local);
  const int cols = static_cast<int>(src.dims[1].local);
  const KernelLaunch* k = l.find_launch(LaunchRole::quantize);
  if (!k) throw std::logic_error("gpu executor: a quantize step without its kernel");
  if (const auto* b = std::get_if<BlockQuantizeKernel>(&k->kernel.description)) {
    BlockQuantizeArgs a;
    a.x = at(s.src);
    if (const KernelLaunch* staged = l.find_launch(LaunchRole::dact_to_staging)) {
      // dact / dbias the block kernel does not fuse: dz into staging first.
      EpilogueArgs e;
      e.x = at(s.src);
      e.rows = rows;
      e.cols = cols;
      if (s.pre_activation != kNoTensor) e.pre_activation = at(s.pre_activation);
      e.out = staging_.get();
      if (s.dbias != kNoTensor) e.dbias_partial = scratch_.get();
      r_.kernels.epilogue(std::get<EpilogueKernel>(staged->kernel.description))
          .launch(e, r_.stream);
      if (s.dbias != kNoTensor) dbias_reduce(l, s.dbias, EpilogueLauncher::dbias_tiles(rows), cols);
      a.x = staging_.get();
    } else if (b->dact != Activation::none) {
      a.pre_activation = at(s.pre_activation);  // dact fused into the block kernel
    }
    a.rows = rows;
    a.cols = cols;
    if (s.rowwise != kNoTensor) {
      a.rowwise = at(s.rowwise);
      a.rowwise_scales = at(s.rowwise_scales);
    }
    if (s.columnwise != kNoTensor) {
      a.columnwise = at(s.columnwise);
      a.columnwise_scales = at(s.columnwise_scales);
    }
    r_.kernels.block_quantize(*b).launch(a, r_.stream);
    return;
  }
  const auto& q = std::get<QuantizeKernel>(k->kernel.description);
  if (s.scale != kNoTensor && static_cast<std::size_t>(s.scale) < weight_scale_.size() &&
      weight_scale_[static_cast<std::size_t>(s.scale)].scale) {
    // The weight cache's own pair: the state's scale as it is now, which the
    // cast weight keeps (and its GEMMs read) until it is cast again.
    const Slot from = state_slot(s.scale), to = weight_scale_[static_cast<std::size_t>(s.scale)];
    FP8C_CU(driver().cuMemcpyDtoDAsync(to.scale, from.scale, 4, r_.stream));
    FP8C_CU(driver().cuMemcpyDtoDAsync(to.inverse, from.inverse, 4, r_.stream));
  }
  QuantizeArgs a;
  a.x = at(s.src);
  a.rows = rows;
  a.cols = cols;
  if (s.pre_activation != kNoTensor) a.pre_activation = at(s.pre_activation);
  if (s.amax_in != kNoTensor) a.amax_in = at(s.amax_in);
  if (s.scale != kNoTensor) a.scale = slot(s.scale).scale;
  if (s.rowwise != kNoTensor) a.rowwise = at(s.rowwise);
  if (s.columnwise != kNoTensor) a.columnwise = at(s.columnwise);
  if (s.amax != kNoTensor) {
    a.amax_out = at(s.amax);
    zero(a.amax_out, 4);
  }
  if (s.dbias != kNoTensor) a.dbias_partial = scratch_.get();
  if (s.scale_out != kNoTensor) a.scale_out = at(s.scale_out);
  r_.kernels.quantize(q).launch(a, r_.stream);
  if (s.dbias != kNoTensor) dbias_reduce(l, s.dbias, QuantizeLauncher::tiles(rows), cols);
}

void GpuRankExecutor::permute(const PermuteStep& s, const LoweredStep& l) {
  const int ranks = r_.comm.size();
  const auto run = [&](int in, int out, LaunchRole role) {
    const Tensor& t = plan_.tensor(in);
    const auto outer = t.dims[static_cast<std::size_t>(t.outer_dim())].local;
    const auto inner = t.dims[static_cast<std::size_t>(t.inner_dim())].local;
    r_.kernels.permute(launch_kernel<PermuteKernel>(l, role))
        .launch(at(in), at(out), ranks, static_cast<int>(outer),
                static_cast<std::int64_t>(inner / static_cast<std::uint64_t>(ranks)), r_.stream);
  };
  run(s.in, s.out, LaunchRole::permute_data);
  if (s.scales_in != kNoTensor) run(s.scales_in, s.scales_out, LaunchRole::permute_scales);
}

void GpuRankExecutor::collective(const Step& step) {
  auto& comm = r_.comm;
  std::visit(
      Overloaded{
          [&](const AmaxAllReduceStep& s) {
            comm.all_reduce(at(s.in), at(s.out), 1, ElemType::fp32, ReduceOp::kMax, r_.stream);
          },
          // Raw bytes: rank i's block lands at i * its size (outermost dim).
          [&](const AllGatherStep& s) {
            comm.all_gather(at(s.in), at(s.out), plan_.tensor(s.in).bytes(), ElemType::u8,
                            r_.stream);
            if (s.scales_in != kNoTensor)
              comm.all_gather(at(s.scales_in), at(s.scales_out), plan_.tensor(s.scales_in).bytes(),
                              ElemType::u8, r_.stream);
          },
          [&](const ReduceScatterStep& s) {
            const Tensor& out = plan_.tensor(s.out);
            comm.reduce_scatter(at(s.in), at(s.out), out.elements(),
                                summed_type(plan_.tensor(s.in).type), ReduceOp::kSum, r_.stream);
          },
          [&](const AllReduceStep& s) {
            const Tensor& out = plan_.tensor(s.out);
            comm.all_reduce(at(s.in), at(s.out), out.elements(),
                            summed_type(plan_.tensor(s.in).type), ReduceOp::kSum, r_.stream);
          },
          [&](const auto&) { throw std::logic_error("gpu executor: not a collective"); },
      },
      step.op);
}

void GpuRankExecutor::scale_update(const ScaleUpdateStep& s, const LoweredStep& l) {
  // The amax inputs are the state's amax array (views), in the state's order.
  for (std::size_t i = 0; i < s.entries.size(); ++i)
    if (at(s.entries[i].amax) != state_.amax(static_cast<int>(i)))
      throw ExecutorError("gpu executor: layer '" + layer_.name +
                          "': the scale update's tensors are not in the state's order");
  ScaleUpdateArgs a;
  a.history = state_.history();
  a.amax = state_.amax();
  a.previous_scale = state_.scale();
  a.scale = state_.scale();
  a.scale_inv = state_.scale_inv();
  if (lowered_.nan_verdict) a.guard = verdict_.get() + lowered_.nan_verdict->watched.size() * 4;
  r_.kernels.scale_update(launch_kernel<ScaleUpdateKernel>(l, LaunchRole::scale_update))
      .launch(a, r_.stream);
}

GemmOperand GpuRankExecutor::operand(int id, int kd) const {
  const Tensor& t = plan_.tensor(id);
  GemmOperand op;
  op.data = at(id);
  op.type = t.type;
  op.scaling = t.scaling;
  const Dim& outer = t.dims[static_cast<std::size_t>(t.outer_dim())];
  const Dim& inner = t.dims[static_cast<std::size_t>(t.inner_dim())];
  if (t.inner_dim() == kd) {
    op.rows = static_cast<std::int64_t>(outer.local);
    op.k = static_cast<std::int64_t>(inner.local);
    op.ld = op.k;
  } else if (!t.is_fp8()) {
    op.k_outer = true;
    op.rows = static_cast<std::int64_t>(inner.local);
    op.k = static_cast<std::int64_t>(outer.local);
    op.ld = op.rows;
  } else {
    throw ExecutorError("gpu executor: GEMM operand " + t.name + " does not have '" +
                        t.dims[static_cast<std::size_t>(kd)].name + "' innermost");
  }
  if (t.scaling == Scaling::per_tensor)
    op.scale_inv = slot(t.scale).inverse;
  else if (t.scaling != Scaling::none)
    op.scale_inv = at(t.scale);
  return op;
}

// An FP8 operand the backend cannot read, dequantized into `into` in the
// layer dtype, logical order [dims[0]][dims[1]].
GemmOperand GpuRankExecutor::dequantized_operand(int id, int kd, const DequantizeKernel& k,
                                                 CUdeviceptr into) {
  const Tensor& t = plan_.tensor(id);
  r_.kernels.dequantize(k).launch(dequantize_args(id, into), r_.stream);
  GemmOperand op;
  op.type = k.output;
  op.data = into;
  if (kd == 1) {
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
}

// A 1x128 operand's scales ([rows][K / 128], as quantized) re-laid out
// K-block-major ([K / 128][rows]) into `into`, where the lowering launches
// it (an MXFP8 operand's codes the same way, bytes [K / 32][rows]); returns
// the next free staging address. A segmented operand's scales
// are [segments][rows][K / 128 / segments]: each segment is transposed on its
// own, so that segment r's scales start r * K / 128 / segments rows in, as a
// whole operand's do.
CUdeviceptr GpuRankExecutor::k_block_major_scales(const LoweredStep& l, LaunchRole role, int id,
                                                  GemmOperand& op, CUdeviceptr into) {
  if (!l.find_launch(role)) return into;
  if (op.scaling == Scaling::mx_1x32) {  // codes [rows][ceil(K / 32)] -> [ceil(K / 32)][rows]
    const std::int64_t codes = (op.k + 31) / 32;
    if (!preparing_)
      r_.kernels.transpose(launch_kernel<TransposeKernel>(l, role))
          .launch(op.scale_inv, into, static_cast<int>(op.rows), static_cast<int>(codes),
                  r_.stream);
    op.scale_inv = into;
    op.scale_order = BlockScaleOrder::k_block_major;
    op.scale_stride = 0;
    return into + round_up(static_cast<std::size_t>(op.rows * codes), 256);
  }
  const std::int64_t blocks = op.k / 128;
  const int segments = plan_.tensor(id).segmented ? static_cast<int>(plan_.ranks) : 1;
  if (!preparing_)
    r_.kernels.transpose(launch_kernel<TransposeKernel>(l, role))
        .launch(op.scale_inv, into, static_cast<int>(op.rows), static_cast<int>(blocks / segments),
                r_.stream, segments);
  op.scale_inv = into;
  op.scale_order = BlockScaleOrder::k_block_major;
  return into + round_up(static_cast<std::size_t>(op.rows * blocks) * 4, 256);
}

// A 128x128 operand's scales ([ceil(rows/128)][K / 128], as quantized)
// copied into `into` with each row of blocks padded to a multiple of 4, as
// cuBLASLt reads them, where the lowering says so; returns the next free
// staging address.
CUdeviceptr GpuRankExecutor::padded_tile_scales(bool pad, GemmOperand& op, CUdeviceptr into) {
  if (!pad) return into;
  const std::size_t blocks = static_cast<std::size_t>(op.k / 128);
  const std::size_t stride = (blocks + 3) / 4 * 4;
  const std::size_t block_rows = static_cast<std::size_t>((op.rows + 127) / 128);
  CUDA_MEMCPY2D copy = {};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = op.scale_inv;
  copy.srcPitch = blocks * 4;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = into;
  copy.dstPitch = stride * 4;
  copy.WidthInBytes = blocks * 4;
  copy.Height = block_rows;
  if (!preparing_) FP8C_CU(driver().cuMemcpy2DAsync(&copy, r_.stream));
  op.scale_inv = into;
  op.scale_stride = static_cast<std::int64_t>(stride);
  return into + round_up(block_rows * stride * 4, 256);
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

void GpuRankExecutor::run_gemm(const GemmStep& s, const GemmCall& call, const GemmArgs& g) {
  GemmRunner* runner = call.backend == "cublaslt"    ? &r_.gemm
                       : call.backend == "generated" ? r_.generated
                                                     : nullptr;
  if (!runner)
    throw ExecutorError("gpu executor: layer '" + layer_.name +
                        "': " + std::string(to_string(s.role)) + " GEMM on '" + call.backend +
                        "', which this executor was not given a runner for");
  std::string why;
  if (!runner->supports(g, &why))
    throw ExecutorError("gpu executor: layer '" + layer_.name +
                        "': " + std::string(to_string(s.role)) + " GEMM of " +
                        plan_.tensor(s.a).name + " and " + plan_.tensor(s.b).name +
                        " is not supported by " + std::string(runner->name()) + ": " + why);
  try {
    if (preparing_)
      runner->prepare(g);
    else
      runner->run(g, r_.stream);
  } catch (const std::exception& e) {
    throw ExecutorError("gpu executor: layer '" + layer_.name +
                        "': " + std::string(to_string(s.role)) + " GEMM (" + describe(g) +
                        "): " + e.what());
  }
}

void GpuRankExecutor::gemm(const GemmStep& s, const LoweredStep& l) {
  const GemmCall* call = l.find<GemmCall>();
  if (!call) throw std::logic_error("gpu executor: a GEMM step without its call");
  const OutputEpilogue& e = s.epilogue;
  const Tensor& out = plan_.tensor(s.out);
  GemmArgs g;
  g.d = at(s.out);
  g.d_type = out.type;
  g.ldd = static_cast<std::int64_t>(out.dims[1].local);
  if (e.pre_activation != kNoTensor) {
    const Tensor& z = plan_.tensor(e.pre_activation);
    g.aux = at(e.pre_activation);
    g.aux_type = z.type;
    g.ld_aux = static_cast<std::int64_t>(z.dims[1].local);
  }
  if (e.out_amax != kNoTensor) {
    g.d_amax = at(e.out_amax);
    if (!preparing_) zero(g.d_amax, 4);
  }
  if (e.bias != kNoTensor) {
    g.bias = at(e.bias);
    g.bias_type = plan_.tensor(e.bias).type;
  }
  if (e.out_scale != kNoTensor) g.d_scale = slot(e.out_scale).scale;
  // A dgrad handing its producer FP8 dz: act' of the producer's z and its
  // dbias in the generated GEMM's epilogue; after cuBLASLt's (high
  // precision into staging), the quantize kernel (below).
  const KernelLaunch* gradient_after = l.find_launch(LaunchRole::gradient_after_gemm);
  if (call->dact != Activation::none) {
    const Tensor& z = plan_.tensor(e.dact_input);
    g.dact = call->dact;
    g.aux = at(e.dact_input);
    g.aux_type = z.type;
    g.ld_aux = static_cast<std::int64_t>(z.dims[1].local);
  }
  if (call->dbias) {
    g.dbias = at(e.dbias);
    g.dbias_type = plan_.tensor(e.dbias).type;
    g.dbias_workspace = scratch_.get();
  }
  QuantizeArgs handed;
  if (gradient_after) {
    const auto& q = std::get<QuantizeKernel>(gradient_after->kernel.description);
    handed.x = gemm_staging_.get();
    handed.rows = static_cast<int>(out.dims[0].local);
    handed.cols = static_cast<int>(out.dims[1].local);
    if (e.dact_input != kNoTensor) handed.pre_activation = at(e.dact_input);
    handed.scale = g.d_scale;
    handed.rowwise = g.d;
    if (e.out_columnwise != kNoTensor) handed.columnwise = at(e.out_columnwise);
    handed.amax_out = g.d_amax;  // zeroed above
    if (e.dbias != kNoTensor) handed.dbias_partial = scratch_.get();
    g.d = gemm_staging_.get();
    g.d_type = q.input;
    g.d_scale = 0;
    g.d_amax = 0;
  }
  g.activation = call->activation;
  g.accumulate = s.accumulate;
  // A chained consumer's columnwise input: D^T from the generated GEMM, or a
  // transpose after cuBLASLt's (below).
  if (call->columnwise_output) {
    g.d_t = at(e.out_columnwise);
    g.ld_dt = static_cast<std::int64_t>(out.dims[0].local);
  }

  // relu / silu: the GEMM writes the pre-activation z (bias included), a
  // kernel makes y (and its FP8 cast and amax) from it.
  std::optional<EpilogueArgs> after;
  if (call->activation_after) {
    EpilogueArgs a;
    a.rows = static_cast<int>(out.dims[0].local);
    a.cols = static_cast<int>(out.dims[1].local);
    a.out = g.d;
    a.scale = g.d_scale;
    a.amax = g.d_amax;
    a.x = g.aux;
    g.d = g.aux;
    g.d_type = g.aux_type;
    g.ldd = g.ld_aux;
    g.aux = 0;
    g.d_scale = 0;
    g.d_amax = 0;
    after = a;
  }
  // A ring this GEMM's form cannot run would leave its collective's output
  // unwritten (the collective's own step issues nothing): refused, not run.
  const auto ring_runs_in = [&](std::initializer_list<RingForm> forms) {
    if (call->ring == RingForm::none || ring_skipped()) return;
    for (RingForm f : forms)
      if (call->ring == f) return;
    throw std::logic_error("gpu executor: layer '" + layer_.name + "': a " +
                           std::string(to_string(call->ring)) + " ring on a " +
                           std::string(to_string(s.role)) + " GEMM that does not run it");
  };
  if (call->operands == GemmCall::Operands::dequantized) {
    ring_runs_in({});
    const auto& ka = launch_kernel<DequantizeKernel>(l, LaunchRole::dequantize_a);
    const auto& kb = launch_kernel<DequantizeKernel>(l, LaunchRole::dequantize_b);
    const Tensor& ta = plan_.tensor(s.a);
    g.a = dequantized_operand(s.a, k_dim(s.role, 0), ka, operand_scratch_.get());
    g.b = dequantized_operand(
        s.b, k_dim(s.role, 1), kb,
        operand_scratch_.get() + round_up(ta.elements() * element_bytes(ka.output), 256));
    run_gemm(s, *call, g);
  } else if (call->segments <= 1) {
    ring_runs_in({RingForm::gather_rows, RingForm::scatter_rows});
    g.a = operand(s.a, k_dim(s.role, 0));
    g.b = operand(s.b, k_dim(s.role, 1));
    CUdeviceptr next =
        k_block_major_scales(l, LaunchRole::scale_layout_a, s.a, g.a, scale_scratch_.get());
    next = k_block_major_scales(l, LaunchRole::scale_layout_b, s.b, g.b, next);
    next = padded_tile_scales(call->pad_scales_a, g.a, next);
    padded_tile_scales(call->pad_scales_b, g.b, next);
    if (call->ring == RingForm::gather_rows && !ring_skipped())
      ring_gather_rows(s, *call, g, ring_collective<AllGatherStep>(*call));
    else if (call->ring == RingForm::scatter_rows && !ring_skipped())
      ring_scatter_rows(s, l, *call, g, ring_collective<ReduceScatterStep>(*call));
    else
      run_gemm(s, *call, g);
  } else {
    // A segmented operand ([ranks][rows][k / ranks], gathered along K) is
    // read one rank segment at a time, accumulating into D.
    ring_runs_in({RingForm::gather_k});
    if (call->pad_scales_a || call->pad_scales_b)
      throw std::logic_error("gpu executor: padded 128x128 scales in a segmented-K GEMM");
    GemmOperand a = operand(s.a, k_dim(s.role, 0));
    GemmOperand b = operand(s.b, k_dim(s.role, 1));
    const CUdeviceptr next =
        k_block_major_scales(l, LaunchRole::scale_layout_a, s.a, a, scale_scratch_.get());
    k_block_major_scales(l, LaunchRole::scale_layout_b, s.b, b, next);
    const std::int64_t segments = call->segments;
    const std::int64_t k_seg = a.k / segments;
    // overlap = ring: the segments in the order they arrive, each as soon
    // as it is there.
    const AllGatherStep* ring = call->ring == RingForm::gather_k && !ring_skipped()
                                    ? &ring_collective<AllGatherStep>(*call)
                                    : nullptr;
    if (ring) ring_gather_begin(*ring);
    for (std::int64_t n = 0; n < segments; ++n) {
      std::int64_t r = n;
      if (ring) {
        r = gathered_segment(r_.comm.rank(), r_.comm.size(), static_cast<int>(n));
        if (n + 1 < segments) ring_gather_shift(*ring, static_cast<int>(n));
        if (!preparing_) FP8C_CU(driver().cuStreamWaitEvent(r_.stream, ring_event(1 + n).get(), 0));
      }
      const auto view = [&](GemmOperand op, const Tensor& t) {
        const std::size_t elem = element_bytes(t.type);
        if (t.segmented) {  // segment r is its own [rows][k_seg] matrix
          op.data += static_cast<CUdeviceptr>(r * op.rows * k_seg) * elem;
          op.ld = k_seg;
        } else {  // columns [r * k_seg, (r + 1) * k_seg) of a [rows][k] matrix
          op.data += static_cast<CUdeviceptr>(r * k_seg) * elem;
        }
        // K-block-major 1x128 scales: segment r's K blocks are rows
        // [r * k_seg / 128, ...) of [K / 128][rows] (the lowering refuses
        // segments that are not whole blocks, and 128x128 scales).
        if (op.scaling == Scaling::block_1x128)
          op.scale_inv += static_cast<CUdeviceptr>(r * (k_seg / 128) * op.rows) * 4;
        // MXFP8 codes ([rows][K / 32] bytes, or per segment [rows][k_seg /
        // 32]): segment r's are a column range, rows as long as stored.
        if (op.scaling == Scaling::mx_1x32) {
          const std::int64_t codes = k_seg / 32;  // the lowering refuses partial blocks
          op.scale_inv += static_cast<CUdeviceptr>(t.segmented ? r * op.rows * codes : r * codes);
          op.scale_stride = t.segmented ? codes : op.k / 32;
        }
        op.k = k_seg;
        return op;
      };
      g.a = view(a, plan_.tensor(s.a));
      g.b = view(b, plan_.tensor(s.b));
      g.accumulate = s.accumulate || n > 0;
      run_gemm(s, *call, g);
    }
  }
  if (after && !preparing_)
    r_.kernels.epilogue(launch_kernel<EpilogueKernel>(l, LaunchRole::activation_after_gemm))
        .launch(*after, r_.stream);
  if (gradient_after && !preparing_) {
    r_.kernels.quantize(std::get<QuantizeKernel>(gradient_after->kernel.description))
        .launch(handed, r_.stream);
    if (e.dbias != kNoTensor)
      dbias_reduce(l, e.dbias, QuantizeLauncher::tiles(handed.rows), handed.cols);
  }
  if (l.find_launch(LaunchRole::transpose_output) && !preparing_)
    r_.kernels.transpose(launch_kernel<TransposeKernel>(l, LaunchRole::transpose_output))
        .launch(at(s.out), at(e.out_columnwise), static_cast<int>(out.dims[0].local),
                static_cast<int>(out.dims[1].local), r_.stream);
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
