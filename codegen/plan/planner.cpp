// The planner. Decisions (docs/plan-json.md has the full list):
// - FP8 GEMMs are TN: each FP8 operand is quantized in the usage whose inner
//   physical dim is the GEMM's K, and only for the FP8 GEMMs that read it.
// - A debug fallback GEMM reads the original high-precision operands at every
//   tensor-parallel size (gathered in high precision where they are sharded),
//   so its meaning, and the FP8 state a layer keeps, do not depend on the
//   number of ranks.
// - Activations are gathered in FP8; reductions run in high precision.
// - Block and MX recipes cannot transpose, so they gather each usage they
//   quantized from high precision; where a rank's share of the gathered dim
//   would cut the blocks of a usage (tokens per rank not a multiple of the
//   block), the high-precision tensor is gathered and quantized after the
//   gather instead (TransformerEngine's rule), so blocks match one rank's.
// - A gather along tokens of a columnwise tensor (tokens is its inner dim)
//   yields rank segments: wgrad reads them as a segmented K when a segment is
//   a whole number of 128-wide K tiles, else a permute makes them contiguous.
// - Per-tensor recipes gather the rowwise grad-output and transpose the
//   gathered copy (one gather instead of two).
// - Per-tensor scales of sharded tensors come from an amax reduced (MAX)
//   over the group, so every rank uses the one-rank scale.
#include "codegen/plan/planner.hpp"

#include <algorithm>
#include <functional>
#include <set>

#include "codegen/plan/plan_check.hpp"

namespace fp8c {
namespace {

constexpr std::uint64_t kGemmKTile = 128;

bool per_tensor(RecipeKind k) {
  return k == RecipeKind::delayed || k == RecipeKind::current;
}

Scaling scaling_for(RecipeKind k, bool weight) {
  switch (k) {
    case RecipeKind::delayed:
    case RecipeKind::current:
      return Scaling::per_tensor;
    case RecipeKind::blockwise:
      return weight ? Scaling::block_128x128 : Scaling::block_1x128;
    case RecipeKind::mxfp8:
      return Scaling::mx_1x32;
    case RecipeKind::none:
      break;
  }
  return Scaling::none;
}

// A layer's output columns on one of its `ranks` (split over a column
// layer's ranks) and its input columns (split over a row layer's).
std::uint64_t local_out_cols(const Layer& l, std::uint32_t ranks) {
  return l.mode == ParallelMode::column && ranks > 1 ? l.out / ranks : l.out;
}
std::uint64_t local_in_cols(const Layer& l, std::uint32_t ranks) {
  return l.mode == ParallelMode::row && ranks > 1 ? l.in / ranks : l.in;
}

// Whether a chained producer's GEMM also writes the columnwise copy of the
// FP8 output it hands its consumer (OutputEpilogue::out_columnwise), so that
// the consumer's wgrad reads it instead of transposing the FP8 input itself:
// where the producer's GEMM writes the output (column parallel, or one rank:
// no reduction and epilogue step after it), the consumer reads the tokens
// as they are handed over (no gather before its wgrad), and each rank's
// output is that rank's input as it is (a plan forced to other ranks than
// the spec's can break that; the hand-over then fails as it did before, and
// the consumer keeps its transpose). Both layers' planners ask it, so the
// producer writes exactly what the consumer reads.
bool chain_hands_columnwise(const Layer& producer, std::uint32_t producer_ranks,
                            const Layer& consumer, std::uint32_t consumer_ranks) {
  const bool column = producer.mode == ParallelMode::column;
  const bool gemm_writes_output = column || producer_ranks == 1;
  const bool consumer_gathers = consumer.mode == ParallelMode::column &&
                                consumer.layout.sequence_parallel && consumer_ranks > 1;
  // The GEMM's output holds every token.
  return gemm_writes_output && !consumer_gathers &&
         local_out_cols(producer, producer_ranks) == local_in_cols(consumer, consumer_ranks);
}

// Whether a chained consumer's dgrad hands its producer FP8 dz instead of
// dx: its GEMM epilogue applies the producer's act' (from the producer's
// saved z), sums the producer's dbias, and stores dz in FP8 with the
// producer's gradient scale, its amax and its columnwise copy; the producer
// quantizes nothing in backward. Where:
// - the producer's recipe is delayed (dz's scale is known before the
//   consumer's dgrad runs; a current or block scale comes from dz itself),
//   and its dgrad and wgrad run in FP8 (no high-precision dz is needed);
// - the consumer's dgrad runs in FP8 and writes dx itself (a row consumer,
//   or one rank: a column consumer over several ranks writes a partial that
//   a sum over the group completes first);
// - the producer reads its gradient's rows as they are (no gather along
//   tokens before its GEMMs: not a sequence-parallel row producer over
//   several ranks), and the consumer's dx columns are the producer's dz
//   columns on each rank.
// Ranks are the ones the plans' blocks and decisions follow (a one-rank
// plan on an N-rank grid decides as the N-rank plan does, so the oracle's
// two runs have the same structure). Both layers' planners ask it.
bool chain_hands_dz(const Layer& producer, std::uint32_t producer_ranks, const Layer& consumer,
                    std::uint32_t consumer_ranks) {
  const auto fallback = [](const Layer& l, GemmKind r) {
    return std::count(l.debug.fallback.begin(), l.debug.fallback.end(), r) > 0;
  };
  // (A producer collecting debug statistics keeps its quantize of dz,
  // which records them.)
  if (producer.recipe.kind != RecipeKind::delayed || !consumer.recipe.is_fp8() ||
      producer.debug.stats || fallback(producer, GemmKind::dgrad) ||
      fallback(producer, GemmKind::wgrad) || fallback(consumer, GemmKind::dgrad))
    return false;
  const bool consumer_writes_dx = consumer.mode == ParallelMode::row || consumer_ranks == 1;
  const bool producer_gathers =
      producer.mode == ParallelMode::row && producer.layout.sequence_parallel && producer_ranks > 1;
  return consumer_writes_dx && !producer_gathers &&
         local_out_cols(producer, producer_ranks) == local_in_cols(consumer, consumer_ranks);
}

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

Dim dim_of(std::string name, std::uint64_t global, bool sharded, std::uint32_t ranks) {
  return Dim{std::move(name), sharded ? global / ranks : global, global};
}

// Which FP8 usages of one operand tensor the plan needs.
struct Usages {
  bool row = false;
  bool col = false;
  bool any() const { return row || col; }
};

struct Quantized {
  int row = kNoTensor;
  int col = kNoTensor;
};
struct QuantizeExtras {
  int pre_activation = kNoTensor;  // fuse dact
  bool dbias = false;              // fuse dbias
  int reuse_amax = kNoTensor;      // current: the amax an earlier quantize of the quantity used
};

// Builds the plan of one layer.
class LayerPlanner {
 public:
  // ranks_of: the tensor-parallel size of any layer of the spec (a chain's
  // two planners agree on what one hands the other).
  // grid_of: the ranks a layer's decisions follow (its block grid's, for a
  // one-rank plan on an N-rank grid).
  LayerPlanner(const Spec& spec, const Layer& layer, std::uint32_t ranks, std::uint64_t tokens,
               std::uint32_t grid_ranks, const std::function<std::uint32_t(const Layer&)>& ranks_of,
               const std::function<std::uint32_t(const Layer&)>& grid_of)
      : layer_(layer), R_(ranks), G_(grid_ranks), T_(tokens) {
    plan_.layer = layer.name;
    plan_.ranks = ranks;
    kind_ = layer.recipe.kind;
    fp8_ = layer.recipe.is_fp8();
    sp_ = layer.layout.sequence_parallel && R_ > 1;
    column_ = layer.mode == ParallelMode::column;
    act_ = layer.activation;
    // A Spec made in code (not by the checker) may hold any ElemType here.
    const std::string site = "layer '" + layer.name + "'";
    hp_ = require_high_precision(layer.dtype, site + " dtype");
    require_high_precision(layer.output_dtype, site + " output dtype");
    fwd_ = require_fp8(layer.recipe.forward, site + " forward format");
    bwd_ = require_fp8(layer.recipe.backward, site + " backward format");
    for (auto g : layer.debug.fallback) fallback_[static_cast<int>(g)] = true;
    if (!fp8_) fallback_[0] = fallback_[1] = fallback_[2] = true;
    // Logical dims of the layer's tensors on this rank.
    tokens_in_ = dim_of("tokens", T_, column_ && sp_, R_);    // X rows
    tokens_out_ = dim_of("tokens", T_, !column_ && sp_, R_);  // final Y / dY rows
    tokens_all_ = dim_of("tokens", T_, false, R_);
    in_ = dim_of("in", layer.in, !column_ && R_ > 1, R_);
    out_ = dim_of("out", layer.out, column_ && R_ > 1, R_);
    const Layer* producer = layer.input.empty() ? nullptr : spec.find_layer(layer.input);
    chained_in_ = producer && fp8_output_consumer(spec, *producer) == &layer;
    consumer_ = fp8_output_consumer(spec, layer);
    columnwise_in_ =
        chained_in_ && chain_hands_columnwise(*producer, ranks_of(*producer), layer, R_);
    columnwise_out_ =
        consumer_ && chain_hands_columnwise(layer, R_, *consumer_, ranks_of(*consumer_));
    const std::uint32_t grid = std::max(R_, G_);
    if (chained_in_ && chain_hands_dz(*producer, grid_of(*producer), layer, grid))
      dz_to_ = producer;
    dz_in_ = consumer_ && chain_hands_dz(layer, grid, *consumer_, grid_of(*consumer_));
    if (layer.output_fp8 && !consumer_) {
      const std::string why = fp8_output_not_honoured(spec, layer);
      plan_.notes.push_back("output = fp8 is not honoured" + (why.empty() ? "" : ": " + why) +
                            "; the output is written in " +
                            std::string(to_string(layer.output_dtype)));
    }
    if (chained_in_ && (layer.save_input == SaveInput::original || !gemm_fp8(GemmRole::fprop) ||
                        !gemm_fp8(GemmRole::wgrad)))
      throw PlanError("layer '" + layer.name + "' takes its input in FP8 from '" + layer.input +
                      "', so it has no high-precision input for save_input = original or a "
                      "fallback fprop/wgrad");
  }

  LayerPlan run() {
    forward();
    backward();
    update();
    note_cut_blocks();
    check_gemm_sizes();
    return std::move(plan_);
  }

 private:
  bool gemm_fp8(GemmRole r) const { return !fallback_[static_cast<int>(r)]; }

  int add(Tensor t) {
    std::string base = t.name;
    for (int n = 2; plan_.find(t.name); ++n) t.name = base + "." + std::to_string(n);
    t.id = static_cast<int>(plan_.tensors.size());
    plan_.tensors.push_back(std::move(t));
    return plan_.tensors.back().id;
  }
  Tensor& at(int id) { return plan_.tensors[static_cast<std::size_t>(id)]; }
  std::string name(const std::string& suffix) const { return layer_.name + "." + suffix; }

  int hp_tensor(Quantity q, Form form, const std::string& n, Dim d0, Dim d1, ElemType type,
                bool external = false, std::string note = {}) {
    Tensor t;
    t.name = name(n);
    t.quantity = q;
    t.form = form;
    t.type = type;
    t.dims = {std::move(d0), std::move(d1)};
    t.external = external;
    t.note = std::move(note);
    return add(std::move(t));
  }

  int scalar(Quantity q, Form form, const std::string& n, bool external = false,
             std::string note = {}) {
    return hp_tensor(q, form, n, Dim{"1", 1, 1}, Dim{"1", 1, 1}, ElemType::fp32, external,
                     std::move(note));
  }

  // The layer's weight split dim (out for column, in for row).
  std::string_view split_dim() const { return column_ ? "out" : "in"; }

  // Where a block-scaled tensor's blocks restart. Its own shard needs none
  // (its dims are local); a one-rank plan on an N-rank grid restarts them at
  // the N-rank shard boundaries of the split dim where those cut blocks.
  std::array<std::uint32_t, 2> grid_segments(const Tensor& t) const {
    std::array<std::uint32_t, 2> s{1, 1};
    if (G_ <= R_ || !t.block_scaled()) return s;
    for (int d = 0; d < 2; ++d) {
      const Dim& dim = t.dims[static_cast<std::size_t>(d)];
      if (dim.name != split_dim() || dim.global % G_ != 0) continue;
      const std::uint64_t block =
          d == t.inner_dim() ? inner_block(t.scaling) : outer_block(t.scaling);
      if ((dim.global / G_) % block != 0) s[static_cast<std::size_t>(d)] = G_;
    }
    return s;
  }

  // The block-scale tensor of block-scaled FP8 data: one scale per block
  // (fp32, or E8M0 for MX), laid out like the data. Blocks restart at each
  // of block_segments[d] parts of dim d: segments * ceil(part / block).
  int block_scale_tensor(const Tensor& data) {
    Tensor s;
    s.name = data.name + ".scale_inv";
    s.quantity = data.quantity;
    s.form = Form::block_scales;
    s.type = data.scaling == Scaling::mx_1x32 ? ElemType::e8m0 : ElemType::fp32;
    s.usage = data.usage;
    s.dims = data.dims;
    s.segmented = data.segmented;
    for (int d = 0; d < 2; ++d) {
      const std::uint64_t block =
          d == data.inner_dim() ? inner_block(data.scaling) : outer_block(data.scaling);
      const std::uint64_t parts = data.block_segments[static_cast<std::size_t>(d)];
      Dim& dim = s.dims[static_cast<std::size_t>(d)];
      const std::uint64_t ranks = dim.global / dim.local;
      dim.local = parts * ceil_div(dim.local / parts, block);
      dim.global = dim.local * ranks;
    }
    return add(std::move(s));
  }

  int fp8_tensor(Quantity q, const std::string& base, const Tensor& like, Usage usage,
                 ElemType type, Scaling scaling, int shared_scale) {
    Tensor t;
    t.name = name(base) + (usage == Usage::rowwise ? ".fp8.row" : ".fp8.col");
    t.quantity = q;
    t.form = Form::fp8;
    t.type = type;
    t.dims = like.dims;
    t.usage = usage;
    t.scaling = scaling;
    t.block_segments = grid_segments(t);
    const int id = add(t);
    at(id).scale = scaling == Scaling::per_tensor ? shared_scale : block_scale_tensor(at(id));
    return id;
  }

  // The delayed-scaling entry of quantity `q`, made on first use with its
  // scale tensor (state: read by every quantize of `q`).
  DelayedTensor& delayed(Quantity q, ElemType format) {
    for (auto& d : plan_.delayed)
      if (d.quantity == q) return d;
    DelayedTensor d;
    d.quantity = q;
    d.format = format;
    d.scale = scalar(q, Form::scale, std::string(to_string(q)) + ".scale_inv", true,
                     "delayed scale from the amax history");
    plan_.delayed.push_back(d);
    delayed_sharded_.push_back(false);
    return plan_.delayed.back();
  }
  std::size_t delayed_index(Quantity q) const {
    for (std::size_t i = 0; i < plan_.delayed.size(); ++i)
      if (plan_.delayed[i].quantity == q) return i;
    return 0;
  }

  // Quantizes high-precision `src` (holding `q`) into the usages in `u`.
  Quantized quantize(std::vector<Step>& pass, int src, Quantity q, ElemType type, bool weight,
                     Usages u, QuantizeExtras extra = {}) {
    Quantized r;
    const Scaling scaling = scaling_for(kind_, weight);
    const std::string base(to_string(q));
    QuantizeStep s;
    s.src = src;
    s.stats = layer_.debug.stats;
    if (extra.pre_activation != kNoTensor) {
      s.pre_activation = extra.pre_activation;
      s.dact = act_;
    }
    s.pow2_scale = layer_.recipe.scale == ScaleForm::pow2 && kind_ != RecipeKind::mxfp8 &&
                   kind_ != RecipeKind::delayed;
    const bool sharded = at(src).sharded() && R_ > 1;
    int shared_scale = kNoTensor;
    if (kind_ == RecipeKind::current) {
      int amax = extra.reuse_amax;
      if (amax == kNoTensor) {
        AmaxStep a;
        a.src = src;
        a.pre_activation = s.pre_activation;
        a.dact = s.dact;
        a.amax = scalar(q, Form::amax, base + ".amax");
        pass.push_back({a});
        amax = a.amax;
        if (sharded) amax = amax_all_reduce(pass, amax);
      }
      s.amax_in = amax;
      last_amax_ = amax;
      shared_scale = scalar(q, Form::scale, base + ".scale_inv");
      s.scale_out = shared_scale;
    } else if (kind_ == RecipeKind::delayed) {
      DelayedTensor& d = delayed(q, type);
      shared_scale = d.scale;
      s.scale = d.scale;
      if (d.amax == kNoTensor) {  // the first quantize of `q` records its amax
        d.amax = scalar(q, Form::amax, base + ".amax");
        s.amax = d.amax;
        delayed_sharded_[delayed_index(q)] = sharded;
      }
    }
    if (u.row) r.row = fp8_tensor(q, base, at(src), Usage::rowwise, type, scaling, shared_scale);
    if (u.col) r.col = fp8_tensor(q, base, at(src), Usage::columnwise, type, scaling, shared_scale);
    s.rowwise = r.row;
    s.columnwise = r.col;
    if (scaling != Scaling::per_tensor) {
      if (r.row != kNoTensor) s.rowwise_scales = at(r.row).scale;
      if (r.col != kNoTensor) s.columnwise_scales = at(r.col).scale;
    }
    if (extra.dbias) {
      dbias_ = hp_tensor(Quantity::db, Form::value, "db", out_, Dim{"1", 1, 1}, hp_);
      s.dbias = dbias_;
    }
    pass.push_back({s});
    return r;
  }

  // Partial sums over the group (a row layer's Y, a column layer's dX),
  // summed in high precision: reduce-scattered along tokens under sequence
  // parallelism, else all-reduced.
  void reduce_partials(std::vector<Step>& pass, int partial, int out) {
    if (sp_) {
      ReduceScatterStep r;
      r.dim = 0;
      r.in = partial;
      r.out = out;
      r.bytes_per_rank = all_gather_bytes(at(partial).bytes(), R_);
      pass.push_back({r});
    } else {
      AllReduceStep r;
      r.in = partial;
      r.out = out;
      r.bytes_per_rank = all_reduce_bytes(at(partial).bytes(), R_);
      pass.push_back({r});
    }
  }

  int amax_all_reduce(std::vector<Step>& pass, int amax) {
    AmaxAllReduceStep r;
    r.in = amax;
    Tensor t = at(amax);
    t.name += ".reduced";
    t.form = Form::amax_reduced;
    t.external = false;
    t.note.clear();
    r.out = add(std::move(t));
    r.bytes_per_rank = all_reduce_bytes(4ull * R_, R_) / R_;  // one fp32, ring: 2(R-1)/R * 4
    pass.push_back({r});
    return r.out;
  }

  // Gathers `src` (sharded along tokens) over the group. Returns the gathered
  // tensor; a gather along a columnwise tensor's tokens comes back segmented.
  int all_gather(std::vector<Step>& pass, int src) {
    const Tensor in = at(src);
    const int d = in.dims[0].sharded() ? 0 : 1;
    const auto du = static_cast<std::size_t>(d);
    Tensor t = in;
    t.name = in.name + ".gathered";
    t.external = false;
    t.note.clear();
    t.dims[du].local = t.dims[du].global;
    if (d != in.outer_dim()) t.segmented = d;
    // Each rank's blocks, as it quantized them (a block never straddles two
    // ranks' segments).
    const std::uint64_t block =
        d == in.inner_dim() ? inner_block(in.scaling) : outer_block(in.scaling);
    if (in.block_scaled() && block > 1) t.block_segments[du] = R_;
    AllGatherStep g;
    g.dim = d;
    g.in = src;
    g.out = add(t);
    std::uint64_t total = at(g.out).bytes();
    if (in.block_scaled()) {
      Tensor st = at(in.scale);
      st.name += ".gathered";
      auto& sd = st.dims[du];
      sd.local = sd.global = sd.local * R_;
      if (d != st.outer_dim()) st.segmented = d;
      g.scales_in = in.scale;
      g.scales_out = add(st);
      at(g.out).scale = g.scales_out;
      total += at(g.scales_out).bytes();
    }
    g.bytes_per_rank = all_gather_bytes(total, R_);
    pass.push_back({g});
    return g.out;
  }

  // The columnwise copy of per-tensor FP8 `row` (the same bytes transposed:
  // same type, scale and dims), named `suffix` in this layer; external (with
  // `note` saying who writes it) or made by a step of this layer.
  int columnwise_copy(int row, const std::string& suffix, bool external, std::string note = {}) {
    Tensor t = at(row);
    t.name = name(suffix);
    t.usage = Usage::columnwise;
    t.external = external;
    t.note = std::move(note);
    return add(std::move(t));
  }

  // `gathered`: the rowwise input is a gather's output (named so).
  int transpose(std::vector<Step>& pass, int row, bool gathered) {
    TransposeStep s;
    s.in = row;
    s.out = columnwise_copy(
        row, std::string(to_string(at(row).quantity)) + ".fp8.col" + (gathered ? ".gathered" : ""),
        false);
    pass.push_back({s});
    return s.out;
  }

  // A segmented gather output made usable as a GEMM's K operand: left as it
  // is (the GEMM walks K segment by segment) when every rank segment is whole
  // K tiles, else permuted to contiguous.
  int k_operand(std::vector<Step>& pass, int t, bool& segmented_k) {
    if (!at(t).segmented) return t;
    const Dim& d = at(t).dims[static_cast<std::size_t>(*at(t).segmented)];
    if ((d.global / R_) % kGemmKTile == 0) {
      segmented_k = true;
      return t;
    }
    Tensor p = at(t);
    p.name += ".permuted";
    p.segmented.reset();
    PermuteStep s;
    s.dim = *at(t).segmented;
    s.in = t;
    s.out = add(std::move(p));
    if (at(t).scale != kNoTensor && at(at(t).scale).segmented) {
      Tensor ps = at(at(t).scale);
      ps.name += ".permuted";
      ps.segmented.reset();
      s.scales_in = at(t).scale;
      s.scales_out = add(std::move(ps));
      at(s.out).scale = s.scales_out;
    }
    pass.push_back({s});
    return s.out;
  }

  // Whether quantizing usages `u` of a tensor sharded along tokens, then
  // gathering them, would cut blocks along tokens (columnwise 1x128 and MX
  // blocks run along tokens): then the high-precision tensor is gathered and
  // quantized whole instead.
  bool gather_cuts_blocks(Usages u) const {
    if (!u.col || per_tensor(kind_) || !fp8_) return false;
    const std::uint64_t block = inner_block(scaling_for(kind_, false));
    return (T_ / R_) % block != 0;
  }

  void note_high_precision_gather(int src, const std::string& why) {
    plan_.notes.push_back(at(src).name + " is gathered in " + std::string(to_string(at(src).type)) +
                          " and quantized after the gather: " + why);
  }

  // --- forward -------------------------------------------------------------

  void forward() {
    auto& f = plan_.forward;
    const bool F = gemm_fp8(GemmRole::fprop), D = gemm_fp8(GemmRole::dgrad),
               G = gemm_fp8(GemmRole::wgrad);
    w_ = hp_tensor(Quantity::w, Form::value, "w", out_, in_, hp_, true, "weight shard");
    plan_.io.w = w_;
    if (layer_.bias) {
      b_ = hp_tensor(Quantity::b, Form::value, "b", out_, Dim{"1", 1, 1}, hp_, true, "bias");
      plan_.io.b = b_;
    }
    x_gathered_ = column_ && sp_;
    // wgrad's columnwise X is made in forward when save_input = fp8.
    const bool col_in_forward = G && layer_.save_input == SaveInput::fp8;
    int fprop_x = kNoTensor;
    if (chained_in_) {
      Tensor t;
      t.name = name("x.fp8.row");
      t.quantity = Quantity::x;
      t.form = Form::fp8;
      t.type = fwd_;
      t.dims = {tokens_in_, in_};
      t.scaling = Scaling::per_tensor;
      t.external = true;
      t.note = "written by '" + layer_.input + "' GEMM with this layer's input scale";
      const int xq = add(t);
      DelayedTensor& d = delayed(Quantity::x, fwd_);
      at(d.scale).note = "delayed scale, handed to the producer's epilogue";
      at(xq).scale = d.scale;
      d.amax =
          scalar(Quantity::x, Form::amax, "x.amax", true, "amax of the producer's GEMM output");
      delayed_sharded_[delayed_index(Quantity::x)] = at(xq).sharded() && R_ > 1;
      plan_.io.x_fp8 = xq;
      plan_.io.x_amax = d.amax;
      x_row_ = xq;
      // Per-tensor: the columnwise copy is the transpose of the chained data,
      // which the producer's GEMM writes beside it where it can.
      if (G && columnwise_in_) {
        x_col_ = columnwise_copy(xq, "x.fp8.col", true,
                                 "written by '" + layer_.input + "' GEMM beside " + at(xq).name);
        plan_.io.x_fp8_col = x_col_;
      } else if (G) {
        x_col_ = transpose(f, xq, false);
      }
      fprop_x = x_gathered_ ? all_gather(f, xq) : xq;
    } else {
      x_ = hp_tensor(Quantity::x, Form::value, "x", tokens_in_, in_, hp_, true,
                     layer_.input.empty() ? "layer input" : "output of '" + layer_.input + "'");
      plan_.io.x = x_;
      Usages local{F, col_in_forward};
      int gathered_hp = kNoTensor;
      if (x_gathered_) {
        if (!F) gathered_hp = all_gather(f, x_);
        if (!F && fp8_) {
          plan_.notes.push_back("fprop runs in high precision (debug fallback): " + at(x_).name +
                                " is gathered in " + std::string(to_string(hp_)));
        }
        if (gather_cuts_blocks(Usages{false, col_in_forward})) {
          // The columnwise copy wgrad reads comes from the whole X.
          if (gathered_hp == kNoTensor) gathered_hp = all_gather(f, x_);
          note_high_precision_gather(
              x_, std::to_string(T_ / R_) +
                      " tokens per rank would cut the columnwise blocks (along tokens)");
          local.col = false;
          x_col_whole_ = true;
        }
      }
      if (local.any()) {
        const Quantized q = quantize(f, x_, Quantity::x, fwd_, false, local);
        x_row_ = q.row;
        x_col_ = q.col;
        x_amax_ = last_amax_;
      }
      if (x_col_whole_) {
        QuantizeExtras e;
        if (kind_ == RecipeKind::current) e.reuse_amax = x_amax_;
        x_col_ = quantize(f, gathered_hp, Quantity::x, fwd_, false, Usages{false, true}, e).col;
      }
      if (F)
        fprop_x = x_gathered_ ? all_gather(f, x_row_) : x_row_;
      else
        fprop_x = x_gathered_ ? gathered_hp : x_;
    }
    // W: rowwise for fprop, columnwise for dgrad; weights are quantized once.
    const Usages wn{F, D};
    if (wn.any()) {
      const Quantized wq = quantize(f, w_, Quantity::w, fwd_, true, wn);
      w_row_ = wq.row;
      w_col_ = wq.col;
    }
    GemmStep g;
    g.role = GemmRole::fprop;
    g.high_precision = !F;
    g.a = fprop_x;
    g.b = F ? w_row_ : w_;
    if (column_ || R_ == 1) {
      g.out = output(g.epilogue, tokens_all_, columnwise_out_);
      f.push_back({g});
      return;
    }
    const int partial = hp_tensor(Quantity::y, Form::partial, "y.partial", tokens_all_, out_, hp_);
    g.out = partial;
    f.push_back({g});
    const int reduced = hp_tensor(Quantity::y, Form::value, "y.reduced", tokens_out_, out_, hp_);
    reduce_partials(f, partial, reduced);
    const bool convert = consumer_ == nullptr && layer_.output_dtype != layer_.dtype;
    if (layer_.bias || act_ != Activation::none || consumer_ || convert) {
      EpilogueStep e;
      e.in = reduced;
      e.out = output(e.epilogue, tokens_out_, false);
      f.push_back({e});
    } else {
      plan_.io.y = reduced;
      plan_.notes.push_back("output is " + at(reduced).name);
    }
  }

  // The layer's final output, written by a GEMM epilogue or an epilogue
  // step: bias, activation (saving the pre-activation for dact), FP8 for a
  // chained delayed-scaling consumer, with its columnwise copy where the
  // consumer reads it (chain_hands_columnwise). Returns the output tensor.
  int output(OutputEpilogue& e, const Dim& rows, bool columnwise) {
    e.bias = b_;
    e.activation = act_;
    if (act_ != Activation::none) {
      z_ = hp_tensor(Quantity::z, Form::value, "z", rows, out_, hp_);  // saved for dact
      e.pre_activation = z_;
      plan_.io.z = z_;
    }
    if (consumer_) {
      e.out_scale = scalar(Quantity::y, Form::scale, "y.scale_inv", true,
                           "input scale of '" + consumer_->name + "'");
      Tensor y;
      y.name = name("y.fp8.row");
      y.quantity = Quantity::y;
      y.form = Form::fp8;
      y.type = consumer_->recipe.forward;
      y.dims = {rows, out_};
      y.scaling = Scaling::per_tensor;
      y.scale = e.out_scale;
      const int out = add(y);
      e.out_amax = scalar(Quantity::y, Form::amax, "y.amax");
      plan_.io.y_fp8 = out;
      plan_.io.y_scale = e.out_scale;
      plan_.io.y_amax = e.out_amax;
      if (columnwise) {
        e.out_columnwise = columnwise_copy(out, "y.fp8.col", false);
        plan_.io.y_fp8_col = e.out_columnwise;
      }
      return out;
    }
    const int y = hp_tensor(Quantity::y, Form::value, "y", rows, out_, layer_.output_dtype);
    plan_.io.y = y;
    return y;
  }

  // Notes the block-scaled tensors whose blocks a shard boundary cuts (the
  // weight's split dim of a sharded tensor is not a whole number of blocks).
  void note_cut_blocks() {
    for (const Tensor& t : plan_.tensors) {
      if (!t.block_scaled() || noted_cut_.count(t.id)) continue;
      for (int d = 0; d < 2; ++d) {
        const Dim& dim = t.dims[static_cast<std::size_t>(d)];
        const std::uint32_t ranks = std::max(R_, G_);
        if (dim.name != split_dim() || ranks <= 1 || dim.global % ranks != 0) continue;
        const std::uint64_t block =
            d == t.inner_dim() ? inner_block(t.scaling) : outer_block(t.scaling);
        const std::uint64_t part = dim.global / ranks;
        if (part % block == 0) continue;
        noted_cut_.insert(t.id);
        plan_.notes.push_back(t.name + ": its " + std::string(to_string(t.scaling)) +
                              " blocks along '" + dim.name + "' are cut at each rank's " +
                              std::to_string(part) + " (not a multiple of " +
                              std::to_string(block) + "): " +
                              (R_ > 1 ? "they differ from a one-rank run's blocks"
                                      : "laid out on the " + std::to_string(G_) + "-rank grid"));
      }
    }
  }

  // --- backward ------------------------------------------------------------

  // The gradient a consumer's dgrad epilogue hands over (chain_hands_dz):
  // FP8 dz (dy without an activation), rowwise and columnwise, with this
  // layer's delayed scale, its amax and the bias gradient, all written
  // there. Returns the rowwise and columnwise tensors.
  Quantized handed_gradient(std::vector<Step>& b, Quantity gq) {
    const std::string base(to_string(gq));
    const std::string by = "written by '" + consumer_->name + "' dgrad's epilogue";
    DelayedTensor& d = delayed(gq, bwd_);
    Tensor like;
    like.dims = {tokens_out_, out_};
    Quantized q;
    q.row = fp8_tensor(gq, base, like, Usage::rowwise, bwd_, Scaling::per_tensor, d.scale);
    at(q.row).external = true;
    at(q.row).note = by;
    q.col = columnwise_copy(q.row, base + ".fp8.col", true, by);
    d.amax = scalar(gq, Form::amax, base + ".amax", true, by);
    delayed_sharded_[delayed_index(gq)] = at(q.row).sharded() && R_ > 1;
    plan_.io.dy = q.row;
    plan_.io.dy_fp8_col = q.col;
    plan_.io.dy_amax = d.amax;
    if (layer_.bias) {
      plan_.io.dy_db =
          hp_tensor(Quantity::db, Form::value, "db.handed", out_, Dim{"1", 1, 1}, hp_, true, by);
      EpilogueStep e;  // into the caller's buffer, bound at this layer's backward
      e.in = plan_.io.dy_db;
      e.out = dbias_ = hp_tensor(Quantity::db, Form::value, "db", out_, Dim{"1", 1, 1}, hp_);
      b.push_back({e});
    }
    plan_.io.db = dbias_;
    plan_.notes.push_back(std::string(act_ != Activation::none ? "dz (dact fused)" : "dy") +
                          " arrives in FP8 from '" + consumer_->name +
                          "' dgrad's epilogue, with its amax, columnwise copy" +
                          (layer_.bias ? " and dbias" : ""));
    return q;
  }

  void backward() {
    auto& b = plan_.backward;
    const bool D = gemm_fp8(GemmRole::dgrad), G = gemm_fp8(GemmRole::wgrad);
    const bool act = act_ != Activation::none;
    const Quantity gq = act ? Quantity::dz : Quantity::dy;
    if (dz_in_) {
      const Quantized q = handed_gradient(b, gq);
      dgrad(b, q.row, kNoTensor);
      wgrad(b, q.col, kNoTensor);
      return;
    }
    dy_ = hp_tensor(Quantity::dy, Form::value, "dy", tokens_out_, out_, hp_, true,
                    "gradient of the output");
    plan_.io.dy = dy_;
    const bool gathered = !column_ && sp_;
    const Usages fp8_uses{D, G};
    const bool hp_needed = !D || !G;
    // Block usages whose blocks the token gather would cut: gather dz in
    // high precision and quantize after the gather.
    const bool gather_hp_for_fp8 = gathered && fp8_uses.any() && gather_cuts_blocks(fp8_uses);
    Usages local = fp8_uses;
    if (gathered && per_tensor(kind_) && fp8_uses.any()) local = Usages{true, false};
    if (gather_hp_for_fp8) local = Usages{};
    int dy_row = kNoTensor, dy_col = kNoTensor;
    if (local.any()) {
      QuantizeExtras e;
      if (act) e.pre_activation = z_;
      e.dbias = layer_.bias;
      const Quantized q = quantize(b, dy_, gq, bwd_, false, local, e);
      dy_row = q.row;
      dy_col = q.col;
    }
    // High-precision dz, for fallback GEMMs or a quantize after the gather;
    // dbias from it where no quantize fused it.
    int dz = kNoTensor;
    if (hp_needed || gather_hp_for_fp8 || (!local.any() && layer_.bias)) {
      const bool dbias_here = layer_.bias && dbias_ == kNoTensor;
      if (act || dbias_here) {
        GradEpilogueStep e;
        e.dy = dy_;
        if (act) {
          e.pre_activation = z_;
          e.dact = act_;
        }
        // The epilogue kernel always stores its v (dy itself without an
        // activation): the high-precision dz downstream steps read. Gathered
        // to be quantized after the gather, dz stays fp32, as a quantize that
        // fuses dact reads it, so the blocks hold the one-rank run's values.
        const ElemType dz_type = act && gather_hp_for_fp8 ? ElemType::fp32 : hp_;
        e.out = hp_tensor(gq, Form::value, std::string(to_string(gq)), tokens_out_, out_, dz_type);
        if (dbias_here) {
          dbias_ = hp_tensor(Quantity::db, Form::value, "db", out_, Dim{"1", 1, 1}, hp_);
          e.dbias = dbias_;
        }
        b.push_back({e});
        dz = e.out;
      } else {
        dz = dy_;
      }
    }
    plan_.io.db = dbias_;
    if (dbias_ != kNoTensor && gathered) {
      // The local tokens give a partial bias gradient: sum it over the group.
      at(dbias_).form = Form::partial;
      AllReduceStep r;
      r.in = dbias_;
      r.out = hp_tensor(Quantity::db, Form::value, "db.reduced", out_, Dim{"1", 1, 1}, hp_);
      r.bytes_per_rank = all_reduce_bytes(at(dbias_).bytes(), R_);
      b.push_back({r});
      plan_.io.db = r.out;
    }
    int dz_hp = dz;
    if (gathered) {
      if (dz != kNoTensor && (hp_needed || gather_hp_for_fp8)) {
        dz_hp = all_gather(b, dz);
        if (gather_hp_for_fp8)
          note_high_precision_gather(
              dz, std::to_string(T_ / R_) +
                      " tokens per rank would cut the columnwise blocks (along tokens)");
      }
      if (gather_hp_for_fp8) {
        const Quantized q = quantize(b, dz_hp, gq, bwd_, false, fp8_uses);
        dy_row = q.row;
        dy_col = q.col;
        if (hp_needed && at(dz_hp).type != hp_) {
          // Fallback GEMMs read dz in the layer dtype, as at one rank.
          EpilogueStep e;
          e.in = dz_hp;
          e.out = hp_tensor(gq, Form::value, std::string(to_string(gq)), tokens_all_, out_, hp_);
          b.push_back({e});
          dz_hp = e.out;
        }
      } else {
        if (dy_row != kNoTensor) dy_row = all_gather(b, dy_row);
        if (per_tensor(kind_) && G)
          dy_col = transpose(b, dy_row, true);
        else if (dy_col != kNoTensor)
          dy_col = all_gather(b, dy_col);
      }
    }
    dgrad(b, dy_row, dz_hp);
    wgrad(b, dy_col, dz_hp);
  }

  // dgrad: dX = dY W, from FP8 dy_row or high-precision dz_hp.
  void dgrad(std::vector<Step>& b, int dy_row, int dz_hp) {
    const bool D = gemm_fp8(GemmRole::dgrad);
    GemmStep g;
    g.role = GemmRole::dgrad;
    g.high_precision = !D;
    g.a = D ? dy_row : dz_hp;
    g.b = D ? w_col_ : w_;
    if (column_ && R_ > 1) {
      const int partial = hp_tensor(Quantity::dx, Form::partial, "dx.partial", tokens_all_,
                                    Dim{"in", layer_.in, layer_.in}, hp_);
      g.out = partial;
      b.push_back({g});
      plan_.io.dx = hp_tensor(Quantity::dx, Form::value, "dx", tokens_in_, in_, hp_);
      reduce_partials(b, partial, plan_.io.dx);
      return;
    }
    const Dim& rows = column_ ? tokens_in_ : tokens_all_;
    if (dz_to_)
      g.out = dz_for_producer(g.epilogue, rows);
    else
      g.out = hp_tensor(Quantity::dx, Form::value, "dx", rows, in_, hp_);
    plan_.io.dx = g.out;
    b.push_back({g});
  }

  // The producer's FP8 dz in place of dx (chain_hands_dz): the dgrad's
  // epilogue applies the producer's act' to its saved z, sums its dbias,
  // and stores with its gradient scale, amax and columnwise copy. The
  // producer's tensors are bound to these by the caller (a Session, the CPU
  // chain). Returns the rowwise dz.
  int dz_for_producer(OutputEpilogue& e, const Dim& rows) {
    const Layer& p = *dz_to_;
    const std::string from = "'" + p.name + "'";
    const ElemType p_hp = require_high_precision(p.dtype, "layer " + from + " dtype");
    e.out_scale =
        scalar(Quantity::dx, Form::scale, "dx.scale_inv", true, "gradient scale of " + from);
    Tensor like;
    like.dims = {rows, in_};
    const int out = fp8_tensor(Quantity::dx, "dx", like, Usage::rowwise,
                               require_fp8(p.recipe.backward, "layer " + from + " backward format"),
                               Scaling::per_tensor, e.out_scale);
    e.out_amax = scalar(Quantity::dx, Form::amax, "dx.amax");
    e.out_columnwise = columnwise_copy(out, "dx.fp8.col", false);
    if (p.activation != Activation::none) {
      e.dact = p.activation;
      e.dact_input = hp_tensor(Quantity::z, Form::value, "dx.pre_activation", rows, in_, p_hp, true,
                               "pre-activation of " + from);
    }
    if (p.bias) e.dbias = hp_tensor(Quantity::db, Form::value, "dx.db", in_, Dim{"1", 1, 1}, p_hp);
    plan_.io.dx_scale = e.out_scale;
    plan_.io.dx_amax = e.out_amax;
    plan_.io.dx_fp8_col = e.out_columnwise;
    plan_.io.dx_dact_input = e.dact_input;
    plan_.io.dx_db = e.dbias;
    plan_.notes.push_back("dgrad hands " + from + " FP8 " +
                          (p.activation != Activation::none ? "dz (its dact fused)" : "dy") +
                          " instead of dx, with its amax, columnwise copy" +
                          (p.bias ? " and dbias" : ""));
    return out;
  }

  // wgrad: dW = dY^T X, K = tokens, from FP8 dy_col or high-precision dz_hp.
  void wgrad(std::vector<Step>& b, int dy_col, int dz_hp) {
    const bool G = gemm_fp8(GemmRole::wgrad);
    GemmStep g;
    g.role = GemmRole::wgrad;
    g.high_precision = !G;
    g.a = G ? k_operand(b, dy_col, g.segmented_k) : dz_hp;
    g.b = wgrad_x(b, g.segmented_k);
    g.out = hp_tensor(Quantity::dw, Form::value, "dw", out_, in_, ElemType::fp32);
    plan_.io.dw = g.out;
    b.push_back({g});
  }

  // X as wgrad reads it.
  int wgrad_x(std::vector<Step>& b, bool& segmented_k) {
    if (!gemm_fp8(GemmRole::wgrad)) {
      // High precision, gathered again in backward (forward's copy is not
      // kept) where X is sharded along tokens.
      return x_gathered_ ? all_gather(b, x_) : x_;
    }
    int col = x_col_;
    if (col == kNoTensor) {
      // save_input = original: quantize only the columnwise usage, from the
      // saved high-precision X (the TE debug-quantizer report's case). The
      // scale is the forward's (same amax, already reduced) where forward
      // quantized X, so no new collective runs.
      QuantizeExtras e;
      if (kind_ == RecipeKind::current) e.reuse_amax = x_amax_;
      int src = x_;
      if (x_gathered_ && gather_cuts_blocks(Usages{false, true})) {
        src = all_gather(b, x_);
        note_high_precision_gather(
            x_, std::to_string(T_ / R_) +
                    " tokens per rank would cut the columnwise blocks (along tokens)");
        x_col_whole_ = true;
      }
      col = quantize(b, src, Quantity::x, fwd_, false, Usages{false, true}, e).col;
    }
    if (x_gathered_ && !x_col_whole_) col = all_gather(b, col);
    bool seg = false;
    const int k = k_operand(b, col, seg);
    // Both operands of a segmented-K GEMM must agree; dY is contiguous here
    // unless it came from a gather too.
    segmented_k = segmented_k || seg;
    return k;
  }

  // --- update (delayed only) ---------------------------------------------

  void update() {
    if (kind_ != RecipeKind::delayed) return;
    ScaleUpdateStep s;
    for (std::size_t i = 0; i < plan_.delayed.size(); ++i) {
      DelayedTensor& d = plan_.delayed[i];
      if (d.amax == kNoTensor) continue;
      d.amax_reduced = delayed_sharded_[i] ? amax_all_reduce(plan_.update, d.amax) : d.amax;
      d.next_scale = scalar(d.quantity, Form::next_scale,
                            std::string(to_string(d.quantity)) + ".scale_inv.next");
      s.entries.push_back({static_cast<int>(i), d.amax_reduced, d.next_scale});
    }
    if (!s.entries.empty()) plan_.update.push_back({s});
  }

  // Every FP8 GEMM's extents meet what `fp8c check` enforces at the spec's
  // size: K, and every feature dim of its operands, a multiple of 16 (32 for
  // MXFP8, whose blocks run along K).
  void check_gemm_sizes() const {
    const std::uint64_t align = kind_ == RecipeKind::mxfp8 ? 32 : 16;
    for (const auto* pass : {&plan_.forward, &plan_.backward})
      for (const Step& step : *pass) {
        const GemmStep* g = step.as<GemmStep>();
        if (!g || g->high_precision) continue;
        for (int id : {g->a, g->b}) {
          const Tensor& t = plan_.tensor(id);
          const Dim& inner = t.dims[static_cast<std::size_t>(t.inner_dim())];
          for (const Dim& d : t.dims) {
            const bool k = &d == &inner;
            if ((d.name == "tokens" && !k) || d.local % align == 0) continue;
            throw PlanError("layer '" + layer_.name + "': the FP8 " +
                            std::string(to_string(g->role)) + " GEMM " +
                            (k ? "contracts over " : "has ") + d.name + " = " +
                            std::to_string(d.local) + (d.sharded() ? " per rank" : "") +
                            ", which is not a multiple of " + std::to_string(align) +
                            " as FP8 GEMMs need (" + std::to_string(R_) + " rank" +
                            (R_ == 1 ? "" : "s") + ", " + std::to_string(T_) + " tokens)");
          }
        }
      }
  }

  const Layer& layer_;
  LayerPlan plan_;
  std::uint32_t R_, G_;
  std::uint64_t T_;
  RecipeKind kind_;
  bool fp8_, sp_, column_;
  Activation act_;
  ElemType hp_, fwd_, bwd_;
  bool fallback_[3] = {false, false, false};
  Dim tokens_in_, tokens_out_, tokens_all_, in_, out_;
  bool chained_in_ = false;
  const Layer* consumer_ = nullptr;
  bool columnwise_in_ = false;    // the producer's GEMM writes x.fp8.col too
  bool columnwise_out_ = false;   // this layer's GEMM writes y.fp8.col for its consumer
  const Layer* dz_to_ = nullptr;  // the producer this layer's dgrad hands FP8 dz (chain_hands_dz)
  bool dz_in_ = false;            // this layer's consumer hands it FP8 dz
  bool x_gathered_ = false;
  bool x_col_whole_ = false;  // X's columnwise copy was quantized from the gathered X
  int x_ = kNoTensor, w_ = kNoTensor, b_ = kNoTensor, z_ = kNoTensor, dy_ = kNoTensor;
  int dbias_ = kNoTensor;
  int last_amax_ = kNoTensor;  // current: the amax the last quantize used
  int x_amax_ = kNoTensor;     // current: the (reduced) amax forward quantized X with
  int x_row_ = kNoTensor, x_col_ = kNoTensor, w_row_ = kNoTensor, w_col_ = kNoTensor;
  std::vector<bool> delayed_sharded_;  // per delayed entry: its amax is a shard's
  std::set<int> noted_cut_;
};

std::uint32_t layer_ranks(const Layer& layer, const PlanOptions& options) {
  const std::uint32_t r = options.ranks.value_or(layer.layout.tensor_parallel);
  if (r == 0) throw PlanError("--ranks must be at least 1");
  const std::uint64_t split = layer.mode == ParallelMode::column ? layer.out : layer.in;
  const char* what = layer.mode == ParallelMode::column ? "out" : "in";
  if (split % r != 0)
    throw PlanError("layer '" + layer.name + "': " + what + " = " + std::to_string(split) +
                    " is not divisible by " + std::to_string(r) + " ranks (" +
                    std::string(to_string(layer.mode)) + " parallel)");
  if (layer.layout.sequence_parallel && r > 1 && options.tokens % r != 0)
    throw PlanError("layer '" + layer.name + "': " + std::to_string(options.tokens) +
                    " tokens are not divisible by " + std::to_string(r) +
                    " ranks (sequence parallel)");
  return r;
}

// The ranks of the block grid `layer` is planned on (PlanOptions::block_grid;
// its own ranks where it has none).
std::uint32_t block_grid_ranks(const Layer& layer, const PlanOptions& options) {
  auto it = options.block_grid.find(layer.name);
  if (it == options.block_grid.end()) return layer_ranks(layer, options);
  PlanOptions at_grid = options;
  at_grid.ranks = it->second;
  return layer_ranks(layer, at_grid);
}

}  // namespace

Plan plan_spec(const Spec& spec, const PlanOptions& options) {
  if (options.tokens == 0) throw PlanError("--tokens must be at least 1");
  if (!options.block_grid.empty() && options.ranks.value_or(0) != 1)
    throw PlanError("a plan on another block grid is a one-rank plan (ranks = 1)");
  Plan plan;
  plan.tokens = options.tokens;
  plan.ranks = options.ranks.value_or(1);
  // Sizes that do not divide, for every layer, before any other rule.
  for (const auto& layer : spec.layers) layer_ranks(layer, options);
  for (const auto& layer : spec.layers) {
    const std::uint32_t r = layer_ranks(layer, options);
    const std::uint32_t grid = block_grid_ranks(layer, options);
    plan.ranks = std::max(plan.ranks, r);
    const auto ranks_of = [&](const Layer& l) { return layer_ranks(l, options); };
    const auto grid_of = [&](const Layer& l) {
      return std::max(layer_ranks(l, options), block_grid_ranks(l, options));
    };
    plan.layers.push_back(
        LayerPlanner(spec, layer, r, options.tokens, grid, ranks_of, grid_of).run());
  }
  if (auto errors = check_plan(plan); !errors.empty()) {
    std::string message = "internal error: the planner produced an invalid plan:";
    for (const auto& e : errors) message += "\n  " + e;
    throw PlanError(message);
  }
  return plan;
}

}  // namespace fp8c
