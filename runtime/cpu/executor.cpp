#include "runtime/cpu/executor.hpp"

#include <algorithm>
#include <random>

#include "codegen/numerics/amax.hpp"
#include "codegen/numerics/scale.hpp"
#include "codegen/plan/plan_check.hpp"
#include "collectives/collective_error.hpp"
#include "collectives/segments.hpp"
#include "runtime/cpu/activation.hpp"
#include "runtime/cpu/gemm.hpp"
#include "runtime/cpu/quantize.hpp"
#include "runtime/cpu/tensor_store.hpp"

namespace fp8c::cpu {
namespace {

namespace coll = fp8c::collectives;

ElemType elem_of(DType d) {
  return d == DType::bf16 ? ElemType::bf16 : d == DType::fp16 ? ElemType::fp16 : ElemType::fp32;
}

coll::DType coll_dtype(ElemType t) {
  switch (t) {
    case ElemType::bf16:
      return coll::DType::kBFloat16;
    case ElemType::fp16:
      return coll::DType::kFloat16;
    case ElemType::fp32:
      return coll::DType::kFloat32;
    default:
      throw ExecutorError("cpu executor: high-precision reduction of an FP8 tensor");
  }
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// This rank's block of a global row-major [g0][g1] matrix under `dims`.
std::vector<float> shard(const std::vector<float>& global, std::uint64_t g1,
                         const std::array<Dim, 2>& dims, int rank) {
  const std::uint64_t r0 = dims[0].sharded() ? rank * dims[0].local : 0;
  const std::uint64_t c0 = dims[1].sharded() ? rank * dims[1].local : 0;
  std::vector<float> out(dims[0].local * dims[1].local);
  for (std::uint64_t i = 0; i < dims[0].local; ++i)
    for (std::uint64_t j = 0; j < dims[1].local; ++j)
      out[i * dims[1].local + j] = global[(r0 + i) * g1 + c0 + j];
  return out;
}

// Executes one pass of a plan on one rank.
class RankExecutor {
 public:
  RankExecutor(const Layer& layer, const LayerPlan& plan, coll::Communicator& comm,
               LayerState& state, int skip_collective, const std::vector<std::string>& capture)
      : capture_(capture),
        layer_(layer),
        plan_(plan),
        comm_(comm),
        state_(state),
        store_(plan),
        skip_collective_(skip_collective) {}

  RankStepResult run(const LayerData& data) {
    fill_externals(data);
    run_pass("forward", plan_.forward);
    run_pass("backward", plan_.backward);
    run_pass("update", plan_.update);
    return results();
  }

  // --- chains: one executor per layer on the same rank, tensors handed over.
  void begin(const LayerData& data) { fill_externals(data); }
  void forward() { run_pass("forward", plan_.forward); }
  void backward() { run_pass("backward", plan_.backward); }
  RankStepResult finish() {
    run_pass("update", plan_.update);
    return results();
  }
  // The producer side: its FP8 output is written with the consumer's scale.
  void set_output_scale(float scale) {
    if (const int id = find("y.scale_inv"); id >= 0) store_.set_scalar(id, scale);
  }
  float input_scale() const { return delayed_scale("x"); }
  // Hands this layer's output to `consumer`'s input on the same rank.
  void hand_output_to(RankExecutor& consumer) {
    const int xq = consumer.find("x.fp8.row");
    if (xq >= 0 && consumer.plan_.tensor(xq).external) {
      const int yq = find("y.fp8.row");
      if (yq < 0)
        throw ExecutorError("cpu executor: chain: '" + layer_.name + "' writes no FP8 output");
      copy_same_shape(store_, yq, consumer.store_, xq);
      if (const int a = consumer.find("x.amax"); a >= 0)
        consumer.store_.set_scalar(a, store_.scalar(find("y.amax")));
      return;
    }
    int y = find("y");
    if (y < 0 || !store_.written(y)) y = find("y.reduced");
    const int x = consumer.find("x");
    check_same_shape(store_, y, consumer.store_, x);
    consumer.store_.write_hp(x, store_.read_hp(y));
  }
  // Hands this (consumer) layer's dX to `producer`'s dY on the same rank.
  void hand_dx_to(RankExecutor& producer) {
    const int dx = find("dx");
    const int dy = producer.find("dy");
    check_same_shape(store_, dx, producer.store_, dy);
    producer.store_.write_hp(dy, store_.read_hp(dx));
  }

 private:
  static void check_same_shape(const TensorStore& a, int ia, const TensorStore& b, int ib) {
    if (ia < 0 || ib < 0 || a.tensor(ia).dims[0].local != b.tensor(ib).dims[0].local ||
        a.tensor(ia).dims[1].local != b.tensor(ib).dims[1].local)
      throw ExecutorError(
          "cpu executor: chain: " + (ia < 0 ? std::string("?") : a.tensor(ia).name) +
          " does not hand over to " + (ib < 0 ? std::string("?") : b.tensor(ib).name) +
          " on a rank as it is (the layouts need a redistribution)");
  }
  static void copy_same_shape(const TensorStore& a, int ia, TensorStore& b, int ib) {
    check_same_shape(a, ia, b, ib);
    const auto from = a.bytes(ia);
    auto to = b.bytes(ib);
    std::copy(from.begin(), from.end(), to.begin());
    b.mark_written(ib);
  }

  // A tensor's name without the layer prefix and without the ".2", ".3"
  // the planner appends to a repeated name (x.scale_inv.2 is a second x
  // scale): "x", "x.amax", "dz.scale_inv", ...
  std::string key(int id) const { return tensor_key(plan_, id); }
  int find(std::string_view k) const {
    const Tensor* t = plan_.find(layer_.name + "." + std::string(k));
    return t ? t->id : -1;
  }
  float delayed_scale(const std::string& k) const {
    auto it = state_.delayed.find(k);
    return it == state_.delayed.end() ? 1.0f : it->second.scale;
  }
  bool pow2() const { return layer_.recipe.scale == ScaleForm::pow2; }

  void fill_externals(const LayerData& d) {
    fill_external_tensors(layer_, store_, state_, d, comm_.rank());
  }

  void run_pass(const char* pass, const std::vector<Step>& steps) {
    for (const auto& s : steps) {
      ExecutedStep e;
      e.pass = pass;
      e.kind = s.kind;
      e.rowwise = s.rowwise;
      e.columnwise = s.columnwise;
      for (int id : s.inputs) e.inputs.push_back(plan_.tensor(id).name);
      for (int id : s.outputs) e.outputs.push_back(plan_.tensor(id).name);
      if (is_collective(s.kind) && collectives_run_++ == 0 && skip_collective_ == comm_.rank()) {
        executed_.push_back(std::move(e));
        continue;  // fault injection: this rank never joins the collective
      }
      execute(s, e);
      executed_.push_back(std::move(e));
    }
  }

  // The value a quantize / amax step reads: the input, times act'(z) when the
  // step fuses dact.
  std::vector<float> quantize_source(const Step& s) {
    std::vector<float> v = store_.read_hp(s.inputs[0]);
    if (s.fused_dact) {
      const std::vector<float> z = store_.read_hp(s.inputs[1]);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] *= activation_grad(layer_.activation, z[i]);
    }
    return v;
  }

  void quantize(const Step& s, ExecutedStep& e) {
    const std::vector<float> v = quantize_source(s);
    // nan = error: fail the step (before any state changes) instead of
    // carrying NaN into the FP8 data.
    if (layer_.recipe.nan == NanPolicy::error &&
        std::any_of(v.begin(), v.end(), [](float x) { return x != x; }))
      throw ExecutorError("cpu executor: layer '" + layer_.name + "': NaN in " +
                          plan_.tensor(s.inputs[0]).name + " (recipe nan = error)");
    const Tensor* first_fp8 = nullptr;
    for (int id : s.outputs)
      if (plan_.tensor(id).is_fp8()) first_fp8 = first_fp8 ? first_fp8 : &plan_.tensor(id);
    if (!first_fp8) throw ExecutorError("cpu executor: quantize without an FP8 output");
    const auto fmt = fp8_format(first_fp8->type);
    // The per-tensor scale: delayed reads it, current derives it from the
    // (group-reduced) amax input.
    float scale = 1.0f;
    const std::size_t first_extra = s.fused_dact ? 2 : 1;
    if (s.inputs.size() > first_extra) {
      const int in = s.inputs[first_extra];
      const float value = store_.scalar(in);
      if (layer_.recipe.kind == RecipeKind::current)
        scale = numerics::scale_from_amax(value, fmt, 1.0f, {0, pow2(), 0.0f});
      else
        scale = value;
    }
    // Block scale tensors are written with their data; a one-block scale
    // tensor must not be mistaken for the per-tensor scale output.
    std::vector<int> block_scales;
    for (int id : s.outputs)
      if (plan_.tensor(id).is_fp8() && plan_.tensor(id).scaling != Scaling::per_tensor)
        block_scales.push_back(plan_.tensor(id).scale);
    for (int id : s.outputs) {
      const Tensor& t = plan_.tensor(id);
      const std::string k = key(id);
      if (std::find(block_scales.begin(), block_scales.end(), id) != block_scales.end()) continue;
      if (t.is_fp8()) {
        const QuantizeStats st = quantize_to(store_, id, v, scale, pow2());
        e.amax = st.amax;
        e.underflows += st.underflows;
        e.overflows += st.overflows;
      } else if (ends_with(k, ".amax")) {
        store_.set_scalar(id, numerics::amax(v));
      } else if (ends_with(k, ".scale_inv") && t.elements() == 1) {
        store_.set_scalar(id, scale);
      } else if (k == "db") {
        store_.write_hp(id, column_sums(v, plan_.tensor(s.inputs[0]).dims));
      }
    }
    e.scale = scale;
  }

  static std::vector<float> column_sums(const std::vector<float>& v, const std::array<Dim, 2>& d) {
    std::vector<float> sums(d[1].local, 0.0f);
    for (std::uint64_t i = 0; i < d[0].local; ++i)
      for (std::uint64_t j = 0; j < d[1].local; ++j) sums[j] += v[i * d[1].local + j];
    return sums;
  }

  // A GEMM operand as [other][K] floats, and the factor its per-tensor
  // scale contributes to the result.
  struct Operand {
    std::vector<float> data;
    std::size_t rows = 0, k = 0;
    float alpha = 1.0f;
  };
  Operand operand(int id, const std::string& k_name) {
    const Tensor& t = plan_.tensor(id);
    Operand op;
    std::vector<float> logical;
    if (t.is_fp8()) {
      const bool per_tensor = t.scaling == Scaling::per_tensor;
      logical = decode(store_, id, !per_tensor);
      if (per_tensor) op.alpha = numerics::scale_inverse(store_.scalar(t.scale));
    } else {
      logical = store_.read_hp(id);
    }
    const std::size_t d0 = t.dims[0].local, d1 = t.dims[1].local;
    if (t.dims[1].name == k_name) {
      op.rows = d0;
      op.k = d1;
      op.data = std::move(logical);
    } else if (t.dims[0].name == k_name) {
      op.rows = d1;
      op.k = d0;
      op.data.resize(logical.size());
      for (std::size_t i = 0; i < d0; ++i)
        for (std::size_t j = 0; j < d1; ++j) op.data[j * d0 + i] = logical[i * d1 + j];
    } else {
      throw ExecutorError("cpu executor: GEMM operand " + t.name + " has no dim '" + k_name + "'");
    }
    return op;
  }

  void gemm(const Step& s) {
    const char* k_name = s.role == GemmRole::fprop   ? "in"
                         : s.role == GemmRole::dgrad ? "out"
                                                     : "tokens";
    const Operand a = operand(s.inputs[0], k_name);
    const Operand b = operand(s.inputs[1], k_name);
    if (a.k != b.k)
      throw ExecutorError("cpu executor: GEMM K mismatch: " + plan_.tensor(s.inputs[0]).name +
                          " vs " + plan_.tensor(s.inputs[1]).name);
    std::vector<float> c(a.rows * b.rows);
    gemm_nt(a.rows, b.rows, a.k, a.data, b.data, c);
    // cuBLAS-style: the product of the per-tensor scale_invs scales the
    // fp32 accumulator once.
    const float alpha = a.alpha * b.alpha;
    if (alpha != 1.0f)
      for (auto& v : c) v *= alpha;
    if (s.role == GemmRole::fprop && (s.bias || s.activation != Activation::none ||
                                      s.outputs.size() > 1 || key(s.outputs[0]) == "y"))
      emit_output(s, std::move(c), b.rows);
    else
      store_.write_hp(s.outputs[0], c);
  }

  // Bias, activation (saving its input z), and the output store: the layer
  // dtype, or FP8 with a chained consumer's scale (plus the output's amax).
  void emit_output(const Step& s, std::vector<float> z, std::size_t cols) {
    for (int id : s.inputs)
      if (key(id) == "b") {
        const std::vector<float> b = store_.read_hp(id);
        for (std::size_t i = 0; i < z.size(); ++i) z[i] += b[i % cols];
      }
    std::vector<float> y = z;
    if (layer_.activation != Activation::none)
      for (auto& v : y) v = activate(layer_.activation, v);
    float out_scale = 1.0f;
    for (int id : s.inputs)
      if (key(id) == "y.scale_inv") out_scale = store_.scalar(id);
    for (int id : s.outputs) {
      const Tensor& t = plan_.tensor(id);
      const std::string k = key(id);
      if (k == "z")
        store_.write_hp(id, z);
      else if (t.is_fp8())
        quantize_to(store_, id, y, out_scale, false);
      else if (ends_with(k, ".amax"))
        store_.set_scalar(id, numerics::amax(y));
      else
        store_.write_hp(id, y);
    }
  }

  void epilogue(const Step& s) {
    if (s.fused_dact || s.fused_dbias) {  // backward: dz = dy * act'(z), dbias
      std::vector<float> v = quantize_source(s);
      for (int id : s.outputs) {
        if (key(id) == "db")
          store_.write_hp(id, column_sums(v, plan_.tensor(s.inputs[0]).dims));
        else
          store_.write_hp(id, v);
      }
      return;
    }
    const Tensor& in = plan_.tensor(s.inputs[0]);
    emit_output(s, store_.read_hp(s.inputs[0]), in.dims[1].local);
  }

  void all_gather(const Step& s) {
    for (std::size_t i = 0; i < s.inputs.size(); ++i) {
      auto send = store_.bytes(s.inputs[i]);
      auto recv = store_.bytes(s.outputs[i]);
      if (recv.size() != send.size() * static_cast<std::size_t>(comm_.size()))
        throw ExecutorError("cpu executor: all_gather of " + plan_.tensor(s.inputs[i]).name +
                            " into a buffer of the wrong size");
      // Raw bytes: rank i's block lands at i * send bytes (outermost dim).
      comm_.all_gather(send.data(), recv.data(), send.size(), coll::DType::kUInt8);
      store_.mark_written(s.outputs[i]);
    }
  }

  void permute(const Step& s) {
    for (std::size_t i = 0; i < s.inputs.size(); ++i) {
      const Tensor& t = plan_.tensor(s.inputs[i]);
      const auto outer = t.dims[static_cast<std::size_t>(t.outer_dim())].local;
      const auto inner = t.dims[static_cast<std::size_t>(t.inner_dim())].local;
      coll::SegmentedShape shape{static_cast<std::size_t>(comm_.size()), outer,
                                 inner / static_cast<std::size_t>(comm_.size()), 1};
      coll::segments_to_dim(store_.bytes(t.id).data(), store_.bytes(s.outputs[i]).data(), shape,
                            element_bytes(t.type));
      store_.mark_written(s.outputs[i]);
    }
  }

  void scale_update(const Step& s) {
    const auto rule = layer_.recipe.amax == AmaxAlgo::max ? numerics::AmaxHistoryRule::max
                                                          : numerics::AmaxHistoryRule::most_recent;
    for (std::size_t i = 0; i < s.inputs.size(); ++i) {
      std::string k = key(s.outputs[i]);
      k = k.substr(0, k.size() - std::string_view(".scale_inv.next").size());
      // Gradients use the backward format, activations and weights forward.
      const bool grad = !k.empty() && k[0] == 'd';
      const auto fmt =
          fp8_format((grad ? layer_.recipe.backward : layer_.recipe.forward) == Fp8Format::e4m3
                         ? ElemType::e4m3
                         : ElemType::e5m2);
      DelayedScale& d = state_.delayed[k];
      if (d.history.empty())
        d.history.assign(std::max<std::uint32_t>(1, layer_.recipe.history), 0.0f);
      std::rotate(d.history.rbegin(), d.history.rbegin() + 1, d.history.rend());
      d.history[0] = store_.scalar(s.inputs[i]);
      d.scale = numerics::delayed_scaling_update(d.history, rule, fmt,
                                                 static_cast<int>(layer_.recipe.margin), d.scale);
      store_.set_scalar(s.outputs[i], d.scale);
    }
  }

  void execute(const Step& s, ExecutedStep& e) {
    switch (s.kind) {
      case StepKind::amax:
        store_.set_scalar(s.outputs[0], numerics::amax(quantize_source(s)));
        break;
      case StepKind::amax_all_reduce: {
        float v = store_.scalar(s.inputs[0]), r = 0.0f;
        comm_.all_reduce(&v, &r, 1, coll::DType::kFloat32, coll::ReduceOp::kMax);
        store_.set_scalar(s.outputs[0], r);
        break;
      }
      case StepKind::quantize:
        quantize(s, e);
        break;
      case StepKind::transpose:
        transpose_fp8(store_, s.inputs[0], s.outputs[0]);
        break;
      case StepKind::all_gather:
        all_gather(s);
        break;
      case StepKind::permute:
        permute(s);
        break;
      case StepKind::dequantize: {
        const std::vector<float> v = decode(store_, s.inputs[0], true);
        store_.write_hp(s.outputs[0], v);
        e.amax = numerics::amax(v);
        break;
      }
      case StepKind::reduce_scatter:
      case StepKind::all_reduce: {
        const Tensor& in = plan_.tensor(s.inputs[0]);
        const Tensor& out = plan_.tensor(s.outputs[0]);
        const auto dt = coll_dtype(in.type);
        if (s.kind == StepKind::reduce_scatter)
          comm_.reduce_scatter(store_.bytes(in.id).data(), store_.bytes(out.id).data(),
                               out.elements(), dt, coll::ReduceOp::kSum);
        else
          comm_.all_reduce(store_.bytes(in.id).data(), store_.bytes(out.id).data(), out.elements(),
                           dt, coll::ReduceOp::kSum);
        store_.mark_written(out.id);
        break;
      }
      case StepKind::gemm:
        gemm(s);
        break;
      case StepKind::epilogue:
        epilogue(s);
        break;
      case StepKind::scale_update:
        scale_update(s);
        break;
    }
  }

  RankStepResult results() {
    RankStepResult r = collect_step_result(layer_, store_, state_, capture_);
    r.executed = std::move(executed_);
    return r;
  }

  const std::vector<std::string>& capture_;
  const Layer& layer_;
  const LayerPlan& plan_;
  coll::Communicator& comm_;
  LayerState& state_;
  TensorStore store_;
  int skip_collective_;
  int collectives_run_ = 0;
  std::vector<ExecutedStep> executed_;
};

}  // namespace

void fill_external_tensors(const Layer& layer, TensorStore& store, const LayerState& state,
                           const LayerData& d, int rank) {
  const LayerPlan& plan = store.plan();
  const auto key = [&](int id) { return tensor_key(plan, id); };
  const auto find = [&](std::string_view k) {
    const Tensor* t = plan.find(layer.name + "." + std::string(k));
    return t ? t->id : -1;
  };
  const auto delayed_scale = [&](const std::string& k) {
    auto it = state.delayed.find(k);
    return it == state.delayed.end() ? 1.0f : it->second.scale;
  };
  for (const auto& t : plan.tensors) {
    if (!t.external) continue;
    const std::string k = key(t.id);
    if ((k == "x" && d.x.empty()) || (k == "dy" && d.dy.empty())) continue;  // handed over
    if (k == "x") {
      store.write_hp(t.id, shard(d.x, layer.in, t.dims, rank));
    } else if (k == "w") {
      store.write_hp(t.id, shard(d.w, layer.in, t.dims, rank));
    } else if (k == "b") {
      store.write_hp(t.id, shard(d.b, 1, t.dims, rank));
    } else if (k == "dy") {
      store.write_hp(t.id, shard(d.dy, layer.out, t.dims, rank));
    } else if (ends_with(k, ".scale_inv") && t.elements() == 1) {
      store.set_scalar(t.id, delayed_scale(k.substr(0, k.size() - 10)));
    }
  }
  // A chained FP8 input (the producer's GEMM wrote it with this layer's
  // delayed scale): stand in for the producer by quantizing X here.
  if (const int xq = find("x.fp8.row"); xq >= 0 && plan.tensor(xq).external && !d.x.empty()) {
    std::vector<float> x = shard(d.x, layer.in, plan.tensor(xq).dims, rank);
    for (auto& v : x) v = round_to(elem_of(layer.dtype), v);
    quantize_to(store, xq, x, store.scalar(plan.tensor(xq).scale), false);
    if (const int a = find("x.amax"); a >= 0) store.set_scalar(a, numerics::amax(x));
  }
}

std::string tensor_key(const LayerPlan& plan, int id) {
  std::string k = plan.tensor(id).name.substr(plan.layer.size() + 1);
  const auto dot = k.rfind('.');
  if (dot != std::string::npos && dot + 1 < k.size() &&
      k.find_first_not_of("0123456789", dot + 1) == std::string::npos)
    k.resize(dot);
  return k;
}

RankStepResult collect_step_result(const Layer& layer, const TensorStore& store,
                                   const LayerState& state,
                                   const std::vector<std::string>& capture) {
  const LayerPlan& plan = store.plan();
  const auto take = [&](std::string_view k, std::vector<float>& values, std::array<Dim, 2>& dims) {
    const Tensor* t = plan.find(layer.name + "." + std::string(k));
    if (!t || !store.written(t->id)) return;
    values = t->is_fp8() ? decode(store, t->id, true) : store.read_hp(t->id);
    dims = t->dims;
  };
  RankStepResult r;
  take("y.reduced", r.y, r.y_dims);
  take("y", r.y, r.y_dims);
  take("y.fp8.row", r.y, r.y_dims);
  take("dx", r.dx, r.dx_dims);
  take("dw", r.dw, r.dw_dims);
  take("db", r.db, r.db_dims);
  take("db.reduced", r.db, r.db_dims);
  r.state = state;
  for (const auto& name : capture) {
    const Tensor* t = plan.find(name);
    if (!t || !store.written(t->id)) continue;
    auto& c = r.captured[name];
    const auto b = store.bytes(t->id);
    c.bytes.assign(b.begin(), b.end());
    if (t->is_fp8())
      c.logical = decode(store, t->id, true);
    else if (t->type != ElemType::e8m0 && t->scaling == Scaling::none && !t->segmented &&
             t->usage == Usage::rowwise)
      c.logical = store.read_hp(t->id);
  }
  return r;
}

LayerData random_layer_data(const Layer& layer, std::uint64_t tokens, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const ElemType t = elem_of(layer.dtype);
  auto fill = [&](std::size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = round_to(t, u(rng));
    return v;
  };
  LayerData d;
  d.x = fill(tokens * layer.in);
  d.w = fill(layer.out * layer.in);
  if (layer.bias) d.b = fill(layer.out);
  d.dy = fill(tokens * layer.out);
  return d;
}

LayerState initial_state(const Layer&) {
  return {};
}

RankStepResult execute_layer_step(const Layer& layer, const LayerPlan& plan,
                                  coll::Communicator& comm, const LayerData& data,
                                  LayerState& state, int skip_collective,
                                  const std::vector<std::string>& capture) {
  if (static_cast<std::uint32_t>(comm.size()) != plan.ranks)
    throw ExecutorError("cpu executor: plan of layer '" + plan.layer + "' is for " +
                        std::to_string(plan.ranks) + " ranks, the group has " +
                        std::to_string(comm.size()));
  return RankExecutor(layer, plan, comm, state, skip_collective, capture).run(data);
}

std::vector<std::vector<RankStepResult>> run_layer(const Layer& layer, const LayerPlan& plan,
                                                   const std::vector<LayerData>& steps,
                                                   const ExecutorOptions& options) {
  if (!options.skip_plan_check) {
    if (auto errors = check_layer_plan(plan); !errors.empty()) {
      std::string m = "cpu executor: the plan of layer '" + plan.layer + "' is invalid:";
      for (const auto& e : errors) m += "\n  " + e;
      throw ExecutorError(m);
    }
  }
  const int n = static_cast<int>(plan.ranks);
  std::vector<std::vector<RankStepResult>> results(static_cast<std::size_t>(n));
  coll::RankGroupOptions group{options.backend, options.timeout};
  auto errors = coll::run_ranks(n, group, [&](coll::Communicator& comm) {
    LayerState state = initial_state(layer);
    auto& mine = results[static_cast<std::size_t>(comm.rank())];
    for (std::size_t i = 0; i < steps.size(); ++i)
      mine.push_back(execute_layer_step(layer, plan, comm, steps[i], state,
                                        i == 0 ? options.skip_collective_on_rank : -1,
                                        options.capture));
  });
  // Prefer the root cause: a collective error over a peer's follow-up.
  std::exception_ptr first;
  for (auto& e : errors) {
    if (!e) continue;
    if (!first) first = e;
  }
  if (first) std::rethrow_exception(first);
  return results;
}

std::vector<std::vector<ChainStepResult>> run_chain(const Layer& first, const LayerPlan& first_plan,
                                                    const Layer& second,
                                                    const LayerPlan& second_plan,
                                                    const std::vector<ChainData>& steps,
                                                    const ExecutorOptions& options) {
  if (first_plan.ranks != second_plan.ranks)
    throw ExecutorError("cpu executor: chain '" + first.name + "' -> '" + second.name +
                        "' runs on different tensor-parallel sizes");
  for (const auto* p : {&first_plan, &second_plan})
    if (auto errors = check_layer_plan(*p); !errors.empty() && !options.skip_plan_check)
      throw ExecutorError("cpu executor: the plan of layer '" + p->layer + "' is invalid:\n  " +
                          errors[0]);
  const int n = static_cast<int>(first_plan.ranks);
  std::vector<std::vector<ChainStepResult>> results(static_cast<std::size_t>(n));
  coll::RankGroupOptions group{options.backend, options.timeout};
  auto errors = coll::run_ranks(n, group, [&](coll::Communicator& comm) {
    LayerState s1 = initial_state(first), s2 = initial_state(second);
    auto& mine = results[static_cast<std::size_t>(comm.rank())];
    for (const auto& data : steps) {
      RankExecutor a(first, first_plan, comm, s1, -1, options.capture);
      RankExecutor b(second, second_plan, comm, s2, -1, options.capture);
      LayerData d1 = data.first, d2 = data.second;
      d1.dy.clear();  // the second layer's dX
      d2.x.clear();   // the first layer's output
      a.begin(d1);
      b.begin(d2);
      a.set_output_scale(b.input_scale());
      a.forward();
      a.hand_output_to(b);
      b.forward();
      b.backward();
      b.hand_dx_to(a);
      a.backward();
      mine.push_back({a.finish(), b.finish()});
    }
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

}  // namespace fp8c::cpu
