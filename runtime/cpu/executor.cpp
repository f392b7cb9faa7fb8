#include "runtime/cpu/executor.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "codegen/lower/ring.hpp"
#include "codegen/numerics/amax.hpp"
#include "codegen/numerics/scale.hpp"
#include "codegen/plan/plan_check.hpp"
#include "collectives/collective_error.hpp"
#include "collectives/ring_sum.hpp"
#include "collectives/segments.hpp"
#include "runtime/cpu/activation.hpp"
#include "runtime/cpu/gemm.hpp"
#include "runtime/cpu/quantize.hpp"
#include "runtime/cpu/tensor_store.hpp"

#include "codegen/plan/overloaded.hpp"

namespace fp8c::cpu {
namespace {

namespace coll = fp8c::collectives;

const std::vector<Replacement> kNoReplacements;
const ChainReplacements kNoChainReplacements;

// The type of a tensor summed over ranks: high precision only.
ElemType summed_type(ElemType t) {
  if (!is_high_precision(t))
    throw ExecutorError("cpu executor: high-precision reduction of an FP8 tensor");
  return t;
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

// dbias: the column sums of a [d0][d1] matrix, in fp32, row by row.
std::vector<float> column_sums(const std::vector<float>& v, const std::array<Dim, 2>& d) {
  std::vector<float> sums(d[1].local, 0.0f);
  for (std::uint64_t i = 0; i < d[0].local; ++i)
    for (std::uint64_t j = 0; j < d[1].local; ++j) sums[j] += v[i * d[1].local + j];
  return sums;
}

// A handed dz as the quantize it replaces makes it: v times act'(z) where
// the producer has an activation, dbias (the column sums) from that in fp32,
// the FP8 store with `scale`, its columnwise copy and its amax. A
// consumer's dgrad epilogue and a producer run alone both make it here.
void store_handed_gradient(TensorStore& store, std::vector<float> v, Activation dact, int z,
                           int out, int columnwise, int amax, int dbias, float scale) {
  if (z != kNoTensor) {
    const std::vector<float> pre = store.read_hp(z);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] *= activation_grad(dact, pre[i]);
  }
  if (dbias != kNoTensor) store.write_hp(dbias, column_sums(v, store.tensor(out).dims));
  quantize_to(store, out, v, scale, false);
  if (columnwise != kNoTensor) transpose_fp8(store, out, columnwise);
  store.set_scalar(amax, numerics::amax(v));
}

// Executes one pass of a plan on one rank.
class RankExecutor {
 public:
  RankExecutor(const Layer& layer, const LayerPlan& plan, coll::Communicator& comm,
               LayerState& state, int skip_collective, const std::vector<std::string>& capture,
               const std::vector<Replacement>& replace)
      : capture_(capture),
        replace_(replace),
        layer_(layer),
        plan_(plan),
        comm_(comm),
        state_(state),
        store_(plan),
        skip_collective_(skip_collective) {}

  RankStepResult run(const LayerData& data) {
    begin(data);
    forward();
    backward();
    return finish();
  }

  // --- chains: one executor per layer on the same rank, tensors handed over.
  // with_x / with_dy false: that input is handed over in a chain instead.
  void begin(const LayerData& data, bool with_x = true, bool with_dy = true) {
    fill_external_tensors(layer_, store_, state_, data, comm_.rank(), with_x, with_dy);
    // FP8 dz from a consumer that is not here: made from dy after forward.
    if (with_dy && plan_.io.dy_fp8_col != kNoTensor) stand_in_dy_ = &data;
  }
  void forward() {
    apply(Replacement::When::before_forward);
    run_pass("forward", plan_.forward);
  }
  void backward() {
    if (plan_.io.z != kNoTensor && store_.written(plan_.io.z)) {
      forward_z_ = store_.read_hp(plan_.io.z);
      forward_z_dims_ = plan_.tensor(plan_.io.z).dims;
    }
    apply(Replacement::When::before_backward);
    // After the replacements: from the z the backward is given.
    if (stand_in_dy_) stand_in_handed_gradient(layer_, store_, *stand_in_dy_, comm_.rank());
    // FP8 dz handed over: its amax tells whether the consumer's epilogue saw
    // a NaN (nan = error fails the step here, as the quantize it replaces did).
    if (layer_.recipe.nan == NanPolicy::error && plan_.io.dy_amax != kNoTensor &&
        std::isnan(store_.scalar(plan_.io.dy_amax)))
      throw ExecutorError("cpu executor: layer '" + layer_.name + "': NaN in " +
                          plan_.tensor(plan_.io.dy).name + " (recipe nan = error)");
    run_pass("backward", plan_.backward);
  }
  RankStepResult finish() {
    run_pass("update", plan_.update);
    return results();
  }
  // The producer side: its FP8 output is written with the consumer's scale.
  void set_output_scale(float scale) {
    if (plan_.io.y_scale != kNoTensor) store_.set_scalar(plan_.io.y_scale, scale);
  }
  float input_scale() const {
    for (const auto& d : plan_.delayed)
      if (d.quantity == Quantity::x) return delayed_scale(d.key());
    return 1.0f;
  }
  // Hands this layer's output to `consumer`'s input on the same rank.
  void hand_output_to(RankExecutor& consumer) {
    const LayerIo& to = consumer.plan_.io;
    if (to.x_fp8 != kNoTensor) {
      if (plan_.io.y_fp8 == kNoTensor)
        throw ExecutorError("cpu executor: chain: '" + layer_.name + "' writes no FP8 output");
      copy_same_shape(store_, plan_.io.y_fp8, consumer.store_, to.x_fp8);
      if (to.x_fp8_col != kNoTensor) {
        if (plan_.io.y_fp8_col == kNoTensor)
          throw ExecutorError("cpu executor: chain: '" + layer_.name +
                              "' writes no columnwise copy of its FP8 output, which '" +
                              consumer.layer_.name + "' reads");
        copy_same_shape(store_, plan_.io.y_fp8_col, consumer.store_, to.x_fp8_col);
      }
      if (to.x_amax != kNoTensor)
        consumer.store_.set_scalar(to.x_amax, store_.scalar(plan_.io.y_amax));
      return;
    }
    check_same_shape(store_, plan_.io.y, consumer.store_, to.x);
    consumer.store_.write_hp(to.x, store_.read_hp(plan_.io.y));
  }
  // The producer side of a consumer that hands it FP8 dz: the scale that
  // consumer's dgrad stores dz with.
  float gradient_scale() const {
    const int dy = plan_.io.dy;
    return dy != kNoTensor && plan_.tensor(dy).is_fp8() ? store_.scalar(plan_.tensor(dy).scale)
                                                        : 1.0f;
  }
  void set_gradient_scale(float scale) {
    if (plan_.io.dx_scale != kNoTensor) store_.set_scalar(plan_.io.dx_scale, scale);
  }
  // Hands this (producer) layer's saved pre-activation to the consumer whose
  // dgrad epilogue applies its act'.
  void hand_pre_activation_to(RankExecutor& consumer) {
    const int to = consumer.plan_.io.dx_dact_input;
    if (to == kNoTensor) return;
    check_same_shape(store_, plan_.io.z, consumer.store_, to);
    consumer.store_.write_hp(to, store_.read_hp(plan_.io.z));
  }
  // Hands this (consumer) layer's dX to `producer`'s dY on the same rank:
  // FP8 dz with its columnwise copy, amax and dbias where the consumer's
  // dgrad wrote those for it.
  void hand_dx_to(RankExecutor& producer) {
    const LayerIo& to = producer.plan_.io;
    if ((to.dy_fp8_col != kNoTensor) != (plan_.io.dx_fp8_col != kNoTensor))
      throw ExecutorError("cpu executor: chain: '" + layer_.name + "' and '" +
                          producer.layer_.name + "' disagree on who makes the FP8 gradient");
    if (to.dy_fp8_col == kNoTensor) {
      check_same_shape(store_, plan_.io.dx, producer.store_, to.dy);
      producer.store_.write_hp(to.dy, store_.read_hp(plan_.io.dx));
      return;
    }
    copy_same_shape(store_, plan_.io.dx, producer.store_, to.dy);
    copy_same_shape(store_, plan_.io.dx_fp8_col, producer.store_, to.dy_fp8_col);
    producer.store_.set_scalar(to.dy_amax, store_.scalar(plan_.io.dx_amax));
    if ((to.dy_db == kNoTensor) != (plan_.io.dx_db == kNoTensor))
      throw ExecutorError("cpu executor: chain: '" + layer_.name + "' and '" +
                          producer.layer_.name + "' disagree on who sums the bias gradient");
    if (to.dy_db != kNoTensor) {
      check_same_shape(store_, plan_.io.dx_db, producer.store_, to.dy_db);
      producer.store_.write_hp(to.dy_db, store_.read_hp(plan_.io.dx_db));
    }
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

  float delayed_scale(const std::string& k) const {
    auto it = state_.delayed.find(k);
    return it == state_.delayed.end() ? 1.0f : it->second.scale;
  }

  void apply(Replacement::When when) {
    for (const Replacement& r : replace_) {
      if (r.when != when || (r.rank >= 0 && r.rank != comm_.rank())) continue;
      if (!r.values.empty()) {
        store_.write_hp(r.tensor, r.values);
        continue;
      }
      auto to = store_.bytes(r.tensor);
      if (r.bytes.size() != to.size())
        throw ExecutorError("cpu executor: a replacement of " + plan_.tensor(r.tensor).name +
                            " has " + std::to_string(r.bytes.size()) + " bytes, the tensor " +
                            std::to_string(to.size()));
      std::copy(r.bytes.begin(), r.bytes.end(), to.begin());
      store_.mark_written(r.tensor);
    }
  }

  void run_pass(const char* pass, const std::vector<Step>& steps) {
    // overlap = ring: the same choice the lowering makes (ring.hpp); the
    // collectives it picks go round the ring, the GEMMs stay whole (a row
    // of the output does not depend on how the rows were chunked).
    rings_ = choose_rings(layer_, plan_, steps).rings;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i];
      step_ = static_cast<int>(i);
      ExecutedStep e;
      e.pass = pass;
      e.kind = s.kind();
      if (const auto* q = s.as<QuantizeStep>()) {
        e.rowwise = q->rowwise != kNoTensor;
        e.columnwise = q->columnwise != kNoTensor;
      }
      for (int id : s.inputs()) e.inputs.push_back(plan_.tensor(id).name);
      for (int id : s.outputs()) e.outputs.push_back(plan_.tensor(id).name);
      if (s.is_collective() && collectives_run_++ == 0 && skip_collective_ == comm_.rank()) {
        executed_.push_back(std::move(e));
        continue;  // fault injection: this rank never joins the collective
      }
      execute(s, e);
      executed_.push_back(std::move(e));
    }
  }

  // The value a quantize / amax / grad-epilogue step reads: the source,
  // times act'(pre) when the step fuses dact.
  std::vector<float> dact_source(int src, int pre, Activation dact) {
    std::vector<float> v = store_.read_hp(src);
    if (pre != kNoTensor) {
      const std::vector<float> z = store_.read_hp(pre);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] *= activation_grad(dact, z[i]);
    }
    return v;
  }

  void quantize(const QuantizeStep& q, ExecutedStep& e) {
    const std::vector<float> v = dact_source(q.src, q.pre_activation, q.dact);
    // nan = error: fail the step (before any state changes) instead of
    // carrying NaN into the FP8 data.
    if (layer_.recipe.nan == NanPolicy::error &&
        std::any_of(v.begin(), v.end(), [](float x) { return x != x; }))
      throw ExecutorError("cpu executor: layer '" + layer_.name + "': NaN in " +
                          plan_.tensor(q.src).name + " (recipe nan = error)");
    const int first = q.rowwise != kNoTensor ? q.rowwise : q.columnwise;
    const ElemType fmt = plan_.tensor(first).type;
    // The per-tensor scale: delayed reads it, current derives it from the
    // (group-reduced) amax.
    float scale = 1.0f;
    if (q.amax_in != kNoTensor)
      scale =
          numerics::scale_from_amax(store_.scalar(q.amax_in), fmt, 1.0f, {0, q.pow2_scale, 0.0f});
    else if (q.scale != kNoTensor)
      scale = store_.scalar(q.scale);
    for (int id : {q.rowwise, q.columnwise}) {
      if (id == kNoTensor) continue;
      const QuantizeStats st = quantize_to(store_, id, v, scale, q.pow2_scale);
      e.amax = st.amax;
      e.underflows += st.underflows;
      e.overflows += st.overflows;
    }
    if (q.scale_out != kNoTensor) store_.set_scalar(q.scale_out, scale);
    if (q.amax != kNoTensor) store_.set_scalar(q.amax, numerics::amax(v));
    if (q.dbias != kNoTensor) store_.write_hp(q.dbias, column_sums(v, plan_.tensor(q.src).dims));
    e.scale = scale;
  }

  // A GEMM operand as [other][K] floats, and the factor its per-tensor
  // scale contributes to the result.
  struct Operand {
    std::vector<float> data;
    std::size_t rows = 0, k = 0;
    float alpha = 1.0f;
  };
  Operand operand(int id, int k_dim) {
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
    if (k_dim == 1) {
      op.rows = d0;
      op.k = d1;
      op.data = std::move(logical);
    } else {
      op.rows = d1;
      op.k = d0;
      op.data.resize(logical.size());
      for (std::size_t i = 0; i < d0; ++i)
        for (std::size_t j = 0; j < d1; ++j) op.data[j * d0 + i] = logical[i * d1 + j];
    }
    return op;
  }

  void gemm(const GemmStep& g) {
    // The logical dim each operand contracts over: fprop K = in (dim 1 of
    // both), dgrad K = out (dim 1 of dY, dim 0 of W), wgrad K = tokens (dim 0).
    const int ka = g.role == GemmRole::wgrad ? 0 : 1;
    const int kb = g.role == GemmRole::fprop ? 1 : 0;
    const Operand a = operand(g.a, ka);
    const Operand b = operand(g.b, kb);
    if (a.k != b.k)
      throw ExecutorError("cpu executor: GEMM K mismatch: " + plan_.tensor(g.a).name + " vs " +
                          plan_.tensor(g.b).name);
    std::vector<float> c(a.rows * b.rows);
    gemm_nt(a.rows, b.rows, a.k, a.data, b.data, c);
    // cuBLAS-style: the product of the per-tensor scale_invs scales the
    // fp32 accumulator once.
    const float alpha = a.alpha * b.alpha;
    if (alpha != 1.0f)
      for (auto& v : c) v *= alpha;
    if (g.role == GemmRole::dgrad)
      emit_gradient(g.epilogue, std::move(c), g.out);
    else
      emit_output(g.epilogue, std::move(c), b.rows, g.out);
  }

  // A dgrad's output: dx, or a producer's FP8 dz (act' of its z, its
  // dbias, the FP8 store with its scale, amax and columnwise copy), from
  // the fp32 result as the producer's fused quantize would make it.
  void emit_gradient(const OutputEpilogue& e, std::vector<float> v, int out) {
    if (!plan_.tensor(out).is_fp8()) {
      store_.write_hp(out, v);
      return;
    }
    store_handed_gradient(store_, std::move(v), e.dact, e.dact_input, out, e.out_columnwise,
                          e.out_amax, e.dbias, store_.scalar(e.out_scale));
  }

  // Bias, activation (saving its input z), and the output store: the layer
  // dtype, or FP8 with a chained consumer's scale (plus the output's amax).
  void emit_output(const OutputEpilogue& e, std::vector<float> z, std::size_t cols, int out) {
    if (e.bias != kNoTensor) {
      const std::vector<float> b = store_.read_hp(e.bias);
      for (std::size_t i = 0; i < z.size(); ++i) z[i] += b[i % cols];
    }
    std::vector<float> y = z;
    if (e.activation != Activation::none)
      for (auto& v : y) v = activate(e.activation, v);
    if (e.pre_activation != kNoTensor) store_.write_hp(e.pre_activation, z);
    if (plan_.tensor(out).is_fp8())
      quantize_to(store_, out, y, e.out_scale != kNoTensor ? store_.scalar(e.out_scale) : 1.0f,
                  false);
    else
      store_.write_hp(out, y);
    // The consumer's columnwise input: the same FP8 bytes, transposed.
    if (e.out_columnwise != kNoTensor) transpose_fp8(store_, out, e.out_columnwise);
    if (e.out_amax != kNoTensor) store_.set_scalar(e.out_amax, numerics::amax(y));
  }

  void grad_epilogue(const GradEpilogueStep& g) {
    std::vector<float> v = dact_source(g.dy, g.pre_activation, g.dact);
    if (g.dbias != kNoTensor) store_.write_hp(g.dbias, column_sums(v, plan_.tensor(g.dy).dims));
    store_.write_hp(g.out, v);
  }

  void gather_bytes(int in, int out) {
    auto send = store_.bytes(in);
    auto recv = store_.bytes(out);
    if (recv.size() != send.size() * static_cast<std::size_t>(comm_.size()))
      throw ExecutorError("cpu executor: all_gather of " + plan_.tensor(in).name +
                          " into a buffer of the wrong size");
    // Raw bytes: rank i's block lands at i * send bytes (outermost dim).
    comm_.all_gather(send.data(), recv.data(), send.size(), ElemType::u8);
    store_.mark_written(out);
  }

  // overlap = ring, gathers: the own segment into its place, then ranks - 1
  // shifts, each passing on the segment that arrived last.
  void ring_gather(int in, int out) {
    auto send = store_.bytes(in);
    auto recv = store_.bytes(out);
    const int rank = comm_.rank(), ranks = comm_.size();
    if (recv.size() != send.size() * static_cast<std::size_t>(ranks))
      throw ExecutorError("cpu executor: ring all_gather of " + plan_.tensor(in).name +
                          " into a buffer of the wrong size");
    const std::size_t n = send.size();
    std::copy(send.begin(), send.end(), recv.begin() + static_cast<std::ptrdiff_t>(rank * n));
    for (int i = 0; i + 1 < ranks; ++i)
      comm_.ring_shift(recv.data() + gathered_segment(rank, ranks, i) * n,
                       recv.data() + gathered_segment(rank, ranks, i + 1) * n, n, ElemType::u8);
    store_.mark_written(out);
  }

  // overlap = ring, reduce-scatter: at step i this rank adds its partial of
  // chunk scattered_chunk(rank, ranks, i) to the running sum (fp32) that
  // arrived and sends it on; the last step's chunk is its own, rounded once
  // (collectives/ring_sum.hpp).
  void ring_scatter(int in, int out) {
    const Tensor& o = plan_.tensor(out);
    const ElemType dt = summed_type(plan_.tensor(in).type);
    const std::size_t count = o.elements(), width = element_bytes(dt);
    const int rank = comm_.rank(), ranks = comm_.size();
    const auto partial = store_.bytes(in);
    if (partial.size() != count * width * static_cast<std::size_t>(ranks))
      throw ExecutorError("cpu executor: ring reduce_scatter of " + plan_.tensor(in).name +
                          " into a buffer of the wrong size");
    std::vector<float> sum(count), received(count);
    for (int i = 0; i < ranks; ++i) {
      const std::uint8_t* mine =
          partial.data() +
          static_cast<std::size_t>(scattered_chunk(rank, ranks, i)) * count * width;
      if (i + 1 == ranks) {
        coll::ring_sum_last(received.data(), mine, dt, store_.bytes(out).data(), count);
        break;
      }
      coll::ring_sum_step(i > 0 ? received.data() : nullptr, mine, dt, sum.data(), count);
      comm_.ring_shift(sum.data(), received.data(), count, ElemType::fp32);
    }
    store_.mark_written(out);
  }

  void permute_bytes(int in, int out) {
    const Tensor& t = plan_.tensor(in);
    const auto outer = t.dims[static_cast<std::size_t>(t.outer_dim())].local;
    const auto inner = t.dims[static_cast<std::size_t>(t.inner_dim())].local;
    coll::SegmentedShape shape{static_cast<std::size_t>(comm_.size()), outer,
                               inner / static_cast<std::size_t>(comm_.size()), 1};
    coll::segments_to_dim(store_.bytes(in).data(), store_.bytes(out).data(), shape,
                          element_bytes(t.type));
    store_.mark_written(out);
  }

  void scale_update(const ScaleUpdateStep& u) {
    const auto rule = layer_.recipe.amax == AmaxAlgo::max ? numerics::AmaxHistoryRule::max
                                                          : numerics::AmaxHistoryRule::most_recent;
    for (const auto& entry : u.entries) {
      const DelayedTensor& dt = plan_.delayed.at(static_cast<std::size_t>(entry.state));
      DelayedScale& d = state_.delayed[dt.key()];
      if (d.history.empty())
        d.history.assign(std::max<std::uint32_t>(1, layer_.recipe.history), 0.0f);
      std::rotate(d.history.rbegin(), d.history.rbegin() + 1, d.history.rend());
      d.history[0] = store_.scalar(entry.amax);
      d.scale = numerics::delayed_scaling_update(d.history, rule, dt.format,
                                                 static_cast<int>(layer_.recipe.margin), d.scale);
      store_.set_scalar(entry.next_scale, d.scale);
    }
  }

  void sum(int in, int out, bool scatter) {
    const Tensor& i = plan_.tensor(in);
    const Tensor& o = plan_.tensor(out);
    const auto dt = summed_type(i.type);
    if (scatter)
      comm_.reduce_scatter(store_.bytes(in).data(), store_.bytes(out).data(), o.elements(), dt,
                           coll::ReduceOp::kSum);
    else
      comm_.all_reduce(store_.bytes(in).data(), store_.bytes(out).data(), o.elements(), dt,
                       coll::ReduceOp::kSum);
    store_.mark_written(out);
  }

  void execute(const Step& step, ExecutedStep& e) {
    std::visit(Overloaded{
                   [&](const AmaxStep& s) {
                     store_.set_scalar(
                         s.amax, numerics::amax(dact_source(s.src, s.pre_activation, s.dact)));
                   },
                   [&](const AmaxAllReduceStep& s) {
                     float v = store_.scalar(s.in), r = 0.0f;
                     comm_.all_reduce(&v, &r, 1, ElemType::fp32, coll::ReduceOp::kMax);
                     store_.set_scalar(s.out, r);
                   },
                   [&](const QuantizeStep& s) { quantize(s, e); },
                   [&](const TransposeStep& s) { transpose_fp8(store_, s.in, s.out); },
                   [&](const AllGatherStep& s) {
                     const bool ring = ring_of(rings_, step_) != nullptr;
                     const auto gather = [&](int in, int out) {
                       ring ? ring_gather(in, out) : gather_bytes(in, out);
                     };
                     gather(s.in, s.out);
                     if (s.scales_in != kNoTensor) gather(s.scales_in, s.scales_out);
                   },
                   [&](const PermuteStep& s) {
                     permute_bytes(s.in, s.out);
                     if (s.scales_in != kNoTensor) permute_bytes(s.scales_in, s.scales_out);
                   },
                   [&](const ReduceScatterStep& s) {
                     if (ring_of(rings_, step_))
                       ring_scatter(s.in, s.out);
                     else
                       sum(s.in, s.out, true);
                   },
                   [&](const AllReduceStep& s) { sum(s.in, s.out, false); },
                   [&](const GemmStep& s) { gemm(s); },
                   [&](const EpilogueStep& s) {
                     emit_output(s.epilogue, store_.read_hp(s.in), plan_.tensor(s.in).dims[1].local,
                                 s.out);
                   },
                   [&](const GradEpilogueStep& s) { grad_epilogue(s); },
                   [&](const ScaleUpdateStep& s) { scale_update(s); },
               },
               step.op);
  }

  RankStepResult results() {
    RankStepResult r = collect_step_result(layer_, store_, state_, capture_);
    r.executed = std::move(executed_);
    if (!forward_z_.empty()) {  // as forward made it, before a replacement
      r.z = std::move(forward_z_);
      r.z_dims = forward_z_dims_;
    }
    return r;
  }

  std::vector<Ring> rings_;  // the pass's (run_pass)
  int step_ = -1;            // the step running, in its pass
  const std::vector<std::string>& capture_;
  const std::vector<Replacement>& replace_;
  const Layer& layer_;
  const LayerPlan& plan_;
  coll::Communicator& comm_;
  LayerState& state_;
  TensorStore store_;
  int skip_collective_;
  int collectives_run_ = 0;
  std::vector<ExecutedStep> executed_;
  std::vector<float> forward_z_;
  std::array<Dim, 2> forward_z_dims_;
  const LayerData* stand_in_dy_ = nullptr;  // begin()'s data, while the step runs
};

}  // namespace

void fill_external_tensors(const Layer& layer, TensorStore& store, const LayerState& state,
                           const LayerData& d, int rank, bool with_x, bool with_dy) {
  const LayerPlan& plan = store.plan();
  const LayerIo& io = plan.io;
  const auto put = [&](int id, const std::vector<float>& global, std::uint64_t cols) {
    if (id != kNoTensor && !global.empty())
      store.write_hp(id, shard(global, cols, plan.tensor(id).dims, rank));
  };
  // Empty (or not wanted) x / dy: handed over in a chain.
  if (with_x) put(io.x, d.x, layer.in);
  put(io.w, d.w, layer.in);
  put(io.b, d.b, 1);
  // FP8 dy is the consumer's (or stand_in_handed_gradient's, after forward).
  if (with_dy && io.dy_fp8_col == kNoTensor) put(io.dy, d.dy, layer.out);
  for (const DelayedTensor& t : plan.delayed) {
    auto it = state.delayed.find(t.key());
    store.set_scalar(t.scale, it == state.delayed.end() ? 1.0f : it->second.scale);
  }
  // A standalone producer of FP8 output writes it with scale 1 (a chain
  // sets its consumer's scale); so does a standalone consumer that hands its
  // producer FP8 dz, whose act' it applies to a stand-in pre-activation:
  // its own input x, a tensor of the same shape (a chain hands the
  // producer's z).
  if (io.y_scale != kNoTensor) store.set_scalar(io.y_scale, 1.0f);
  if (io.dx_scale != kNoTensor) store.set_scalar(io.dx_scale, 1.0f);
  if (io.dx_dact_input != kNoTensor && with_x) put(io.dx_dact_input, d.x, layer.in);
  // A chained FP8 input (the producer's GEMM wrote it with this layer's
  // delayed scale): stand in for the producer by quantizing X here.
  if (io.x_fp8 != kNoTensor && with_x && !d.x.empty()) {
    std::vector<float> x = shard(d.x, layer.in, plan.tensor(io.x_fp8).dims, rank);
    for (auto& v : x) v = round_to(layer.dtype, v);
    quantize_to(store, io.x_fp8, x, store.scalar(plan.tensor(io.x_fp8).scale), false);
    if (io.x_fp8_col != kNoTensor) transpose_fp8(store, io.x_fp8, io.x_fp8_col);
    if (io.x_amax != kNoTensor) store.set_scalar(io.x_amax, numerics::amax(x));
  }
}

void stand_in_handed_gradient(const Layer& layer, TensorStore& store, const LayerData& data,
                              int rank) {
  const LayerPlan& plan = store.plan();
  const LayerIo& io = plan.io;
  if (io.dy_fp8_col == kNoTensor) return;
  const Tensor& row = plan.tensor(io.dy);
  store_handed_gradient(store, shard(data.dy, layer.out, row.dims, rank), layer.activation,
                        layer.activation != Activation::none ? io.z : kNoTensor, io.dy,
                        io.dy_fp8_col, io.dy_amax, io.dy_db, store.scalar(row.scale));
}

RankStepResult collect_step_result(const Layer&, const TensorStore& store, const LayerState& state,
                                   const std::vector<std::string>& capture) {
  const LayerPlan& plan = store.plan();
  const auto take = [&](int id, std::vector<float>& values, std::array<Dim, 2>& dims) {
    if (id == kNoTensor || !store.written(id)) return;
    const Tensor& t = plan.tensor(id);
    values = t.is_fp8() ? decode(store, id, true) : store.read_hp(id);
    dims = t.dims;
  };
  RankStepResult r;
  take(plan.io.y != kNoTensor ? plan.io.y : plan.io.y_fp8, r.y, r.y_dims);
  take(plan.io.dx, r.dx, r.dx_dims);
  take(plan.io.dw, r.dw, r.dw_dims);
  take(plan.io.db, r.db, r.db_dims);
  take(plan.io.z, r.z, r.z_dims);
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
  const ElemType t = layer.dtype;
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
                                  const std::vector<std::string>& capture,
                                  const std::vector<Replacement>& replace) {
  if (static_cast<std::uint32_t>(comm.size()) != plan.ranks)
    throw ExecutorError("cpu executor: plan of layer '" + plan.layer + "' is for " +
                        std::to_string(plan.ranks) + " ranks, the group has " +
                        std::to_string(comm.size()));
  return RankExecutor(layer, plan, comm, state, skip_collective, capture, replace).run(data);
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
      mine.push_back(execute_layer_step(
          layer, plan, comm, steps[i], state, i == 0 ? options.skip_collective_on_rank : -1,
          options.capture, i < options.replace.size() ? options.replace[i] : kNoReplacements));
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
                                                    const ExecutorOptions& options,
                                                    const std::vector<ChainReplacements>& replace) {
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
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const ChainData& data = steps[i];
      const ChainReplacements& r = i < replace.size() ? replace[i] : kNoChainReplacements;
      RankExecutor a(first, first_plan, comm, s1, -1, options.capture, r.first);
      RankExecutor b(second, second_plan, comm, s2, -1, options.capture, r.second);
      // Not copied: each rank reads its shards of the weights (a copy per
      // rank was 8 bytes per weight per rank). The first layer's dY is the
      // second's dX, the second's X the first's output.
      a.begin(data.first, true, false);
      b.begin(data.second, false, true);
      a.set_output_scale(b.input_scale());
      b.set_gradient_scale(a.gradient_scale());
      a.forward();
      a.hand_output_to(b);
      b.forward();
      a.hand_pre_activation_to(b);
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
