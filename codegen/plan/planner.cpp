// The planner. Decisions (docs/plan-json.md has the full list):
// - FP8 GEMMs are TN: each FP8 operand is quantized in the usage whose inner
//   physical dim is the GEMM's K, and in no other usage.
// - Activations are gathered in FP8; reductions run in high precision.
// - A gather along tokens of a columnwise tensor (tokens is its inner dim)
//   yields rank segments: wgrad reads them as a segmented K when a segment is
//   a whole number of 128-wide K tiles, else a permute makes them contiguous.
// - Per-tensor recipes gather the rowwise grad-output and transpose the
//   gathered copy (one gather instead of two); block and MX recipes cannot
//   transpose, so they gather each usage they quantized from high precision.
// - A debug fallback GEMM reads the high-precision tensor when this rank has
//   it whole, else dequantizes the FP8 operand the FP8 GEMM would have read,
//   so debugging never changes what is communicated.
#include "codegen/plan/planner.hpp"

#include <algorithm>

#include "codegen/plan/plan_check.hpp"

namespace fp8c {
namespace {

constexpr std::uint64_t kGemmKTile = 128;

ElemType to_elem(DType d) {
  switch (d) {
    case DType::bf16:
      return ElemType::bf16;
    case DType::fp16:
      return ElemType::fp16;
    case DType::fp32:
      return ElemType::fp32;
  }
  return ElemType::bf16;
}

ElemType to_elem(Fp8Format f) {
  return f == Fp8Format::e4m3 ? ElemType::e4m3 : ElemType::e5m2;
}

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

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

Dim dim_of(std::string name, std::uint64_t global, bool sharded, std::uint32_t ranks) {
  return Dim{std::move(name), sharded ? global / ranks : global, global};
}

// Which FP8 usages of one operand tensor the plan needs.
struct Needs {
  bool row = false;
  bool col = false;
  bool any() const { return row || col; }
};

// Builds the plan of one layer.
class LayerPlanner {
 public:
  LayerPlanner(const Spec& spec, const Layer& layer, std::uint32_t ranks, std::uint64_t tokens)
      : spec_(spec), layer_(layer), R_(ranks), T_(tokens) {
    plan_.layer = layer.name;
    plan_.ranks = ranks;
    kind_ = layer.recipe.kind;
    fp8_ = layer.recipe.is_fp8();
    sp_ = layer.layout.sequence_parallel && R_ > 1;
    column_ = layer.mode == ParallelMode::column;
    hp_ = to_elem(layer.dtype);
    fwd_ = to_elem(layer.recipe.forward);
    bwd_ = to_elem(layer.recipe.backward);
    for (auto g : layer.debug.fallback) fallback_[static_cast<int>(g)] = true;
    if (!fp8_) fallback_[0] = fallback_[1] = fallback_[2] = true;
    // Logical dims of the layer's tensors on this rank.
    tokens_in_ = dim_of("tokens", T_, column_ && sp_, R_);    // X rows
    tokens_out_ = dim_of("tokens", T_, !column_ && sp_, R_);  // final Y / dY rows
    tokens_all_ = dim_of("tokens", T_, false, R_);
    in_ = dim_of("in", layer.in, !column_ && R_ > 1, R_);
    out_ = dim_of("out", layer.out, column_ && R_ > 1, R_);
    const Layer* producer = layer.input.empty() ? nullptr : spec.find_layer(layer.input);
    chained_in_ = producer && producer->output_fp8 && kind_ == RecipeKind::delayed;
    for (const auto& other : spec.layers)
      if (other.input == layer.name) consumer_ = &other;
    chained_out_ = layer.output_fp8 && consumer_ && consumer_->recipe.kind == RecipeKind::delayed;
    if (layer.output_fp8 && !chained_out_)
      plan_.notes.push_back("output = fp8 is written in " + std::string(to_string(layer.dtype)) +
                            (consumer_ ? ": consumer '" + consumer_->name + "' uses recipe " +
                                             std::string(to_string(consumer_->recipe.kind)) +
                                             ", whose scale is not known before this GEMM runs"
                                       : ": no layer consumes it"));
  }

  LayerPlan run() {
    forward();
    backward();
    update();
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

  int hp_tensor(const std::string& n, Dim d0, Dim d1, ElemType type, bool external,
                std::string note = {}) {
    Tensor t;
    t.name = name(n);
    t.type = type;
    t.dims = {std::move(d0), std::move(d1)};
    t.external = external;
    t.note = std::move(note);
    return add(std::move(t));
  }

  int scalar(const std::string& n, bool external, std::string note = {}) {
    return hp_tensor(n, Dim{"1", 1, 1}, Dim{"1", 1, 1}, ElemType::fp32, external, std::move(note));
  }

  // The scale tensor of an FP8 data tensor: one fp32 for per-tensor, one per
  // block (fp32, or E8M0 for MX) laid out like the data.
  int scale_tensor(const Tensor& data) {
    if (data.scaling == Scaling::per_tensor) return -1;
    Tensor s;
    s.name = data.name + ".scale_inv";
    s.type = data.scaling == Scaling::mx_1x32 ? ElemType::e8m0 : ElemType::fp32;
    s.usage = data.usage;
    s.dims = data.dims;
    const std::uint64_t inner_block = data.scaling == Scaling::mx_1x32 ? 32 : 128;
    auto& inner = s.dims[static_cast<std::size_t>(data.inner_dim())];
    // A sharded dim's blocks are each rank's own (a block never straddles
    // two ranks): R * ceil(local / block) in all, which is more than
    // ceil(global / block) when local is not a multiple of the block.
    auto blocks = [](Dim& d, std::uint64_t block) {
      const std::uint64_t ranks = d.global / d.local;
      d.local = ceil_div(d.local, block);
      d.global = d.local * ranks;
    };
    blocks(inner, inner_block);
    if (data.scaling == Scaling::block_128x128)
      blocks(s.dims[static_cast<std::size_t>(data.outer_dim())], 128);
    return add(std::move(s));
  }

  int fp8_tensor(const std::string& base, const Tensor& like, Usage usage, ElemType type,
                 Scaling scaling, int shared_scale) {
    Tensor t;
    t.name = base + (usage == Usage::rowwise ? ".fp8.row" : ".fp8.col");
    t.type = type;
    t.dims = like.dims;
    t.usage = usage;
    t.scaling = scaling;
    const int id = add(t);
    at(id).scale = scaling == Scaling::per_tensor ? shared_scale : scale_tensor(at(id));
    return id;
  }

  struct Quantized {
    int row = -1;
    int col = -1;
    int amax = -1;  // delayed: this step's amax, for the scale update
  };

  // Quantizes high-precision `src` into the usages in `needs`. Per-tensor
  // scales get the MAX over the group first whenever `src` is sharded, so the
  // scale equals the one-rank run's.
  Quantized quantize(std::vector<Step>& pass, int src, const std::string& base, ElemType type,
                     bool weight, Needs needs, int aux = -1, bool dbias_out = false,
                     int* dbias = nullptr, bool record_amax = true, int reuse_amax = -1) {
    Quantized q;
    const Scaling scaling = scaling_for(kind_, weight);
    Step s;
    s.kind = StepKind::quantize;
    s.inputs = {src};
    s.rowwise = needs.row;
    s.columnwise = needs.col;
    s.stats = layer_.debug.stats;
    s.fused_dact = aux >= 0;
    if (aux >= 0) s.inputs.push_back(aux);
    int shared_scale = -1;
    const bool sharded = at(src).sharded() && R_ > 1;
    if (kind_ == RecipeKind::current && reuse_amax >= 0) {
      s.inputs.push_back(reuse_amax);
      shared_scale = scalar(base.substr(layer_.name.size() + 1) + ".scale_inv", false);
    } else if (kind_ == RecipeKind::current) {
      Step a;
      a.kind = StepKind::amax;
      a.inputs = s.inputs;
      a.fused_dact = aux >= 0;
      int amax = scalar(base.substr(layer_.name.size() + 1) + ".amax", false);
      a.outputs = {amax};
      pass.push_back(a);
      if (sharded) amax = amax_all_reduce(pass, amax);
      s.inputs.push_back(amax);
      if (src == x_) x_amax_ = amax;
      shared_scale = scalar(base.substr(layer_.name.size() + 1) + ".scale_inv", false);
    } else if (kind_ == RecipeKind::delayed) {
      shared_scale = scalar(base.substr(layer_.name.size() + 1) + ".scale_inv", true,
                            "delayed scale from the amax history");
      s.inputs.push_back(shared_scale);
      s.fused_amax = record_amax;
    }
    if (needs.row) q.row = fp8_tensor(base, at(src), Usage::rowwise, type, scaling, shared_scale);
    if (needs.col)
      q.col = fp8_tensor(base, at(src), Usage::columnwise, type, scaling, shared_scale);
    for (int id : {q.row, q.col}) {
      if (id < 0) continue;
      s.outputs.push_back(id);
      if (at(id).scale >= 0 && at(id).scaling != Scaling::per_tensor)
        s.outputs.push_back(at(id).scale);
    }
    if (kind_ == RecipeKind::current) s.outputs.push_back(shared_scale);
    if (s.fused_amax) {
      q.amax = scalar(base.substr(layer_.name.size() + 1) + ".amax", false);
      s.outputs.push_back(q.amax);
      delayed_amaxes_.push_back({q.amax, sharded});
    }
    if (dbias_out) {
      s.fused_dbias = true;
      *dbias = hp_tensor("db", out_, Dim{"1", 1, 1}, hp_, false);
      s.outputs.push_back(*dbias);
    }
    pass.push_back(s);
    return q;
  }

  // Partial sums over the group (a row layer's Y, a column layer's dX),
  // summed in high precision: reduce-scattered along tokens under sequence
  // parallelism, else all-reduced.
  void reduce_partials(std::vector<Step>& pass, int partial, int out) {
    Step red;
    red.kind = sp_ ? StepKind::reduce_scatter : StepKind::all_reduce;
    red.dim = 0;
    red.inputs = {partial};
    red.outputs = {out};
    red.bytes_per_rank =
        sp_ ? all_gather_bytes(at(partial).bytes(), R_) : all_reduce_bytes(at(partial).bytes(), R_);
    pass.push_back(red);
  }

  int amax_all_reduce(std::vector<Step>& pass, int amax) {
    Step r;
    r.kind = StepKind::amax_all_reduce;
    r.inputs = {amax};
    Tensor t = at(amax);
    t.name += ".reduced";
    t.external = false;
    t.note.clear();
    const int out = add(std::move(t));
    r.outputs = {out};
    r.bytes_per_rank = all_reduce_bytes(4ull * R_, R_) / R_;  // one fp32, ring: 2(R-1)/R * 4
    pass.push_back(r);
    return out;
  }

  // Gathers `src` (sharded along tokens) over the group. Returns the gathered
  // tensor; a gather along a columnwise tensor's tokens comes back segmented.
  int all_gather(std::vector<Step>& pass, int src) {
    const Tensor in = at(src);
    const int d = in.dims[0].sharded() ? 0 : 1;
    Tensor t = in;
    t.name = in.name + ".gathered";
    t.external = false;
    t.note.clear();
    t.dims[static_cast<std::size_t>(d)].local = t.dims[static_cast<std::size_t>(d)].global;
    if (d != in.outer_dim()) t.segmented = d;
    Step g;
    g.kind = StepKind::all_gather;
    g.dim = d;
    g.inputs = {src};
    const int out = add(t);
    g.outputs = {out};
    std::uint64_t total = at(out).bytes();
    if (in.scale >= 0 && in.scaling != Scaling::per_tensor) {
      Tensor st = at(in.scale);
      st.name = at(in.scale).name + ".gathered";
      // Each rank's blocks are gathered as they are: R times the local block
      // count (a block never straddles two ranks' segments).
      auto& sd = st.dims[static_cast<std::size_t>(d)];
      sd.local = sd.global = sd.local * R_;
      if (d != st.outer_dim()) st.segmented = d;
      g.inputs.push_back(in.scale);
      const int sid = add(st);
      g.outputs.push_back(sid);
      at(out).scale = sid;
      total += at(sid).bytes();
    }
    g.bytes_per_rank = all_gather_bytes(total, R_);
    const std::uint64_t block = in.scaling == Scaling::mx_1x32 ? 32 : 128;
    if (in.scaling != Scaling::none && in.scaling != Scaling::per_tensor &&
        in.dims[static_cast<std::size_t>(d)].local % block != 0)
      plan_.notes.push_back(
          in.name + ": " + std::to_string(in.dims[static_cast<std::size_t>(d)].local) + " " +
          in.dims[static_cast<std::size_t>(d)].name + " per rank is not a multiple of the " +
          std::to_string(block) + "-element scaling block: blocks differ from the 1-rank run");
    pass.push_back(g);
    return out;
  }

  int transpose(std::vector<Step>& pass, int row) {
    Tensor t = at(row);
    t.name.replace(t.name.find(".fp8.row"), 8, ".fp8.col");
    t.usage = Usage::columnwise;
    t.external = false;
    t.note.clear();
    Step s;
    s.kind = StepKind::transpose;
    s.inputs = {row};
    const int out = add(std::move(t));
    s.outputs = {out};
    pass.push_back(s);
    return out;
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
    Step s;
    s.kind = StepKind::permute;
    s.dim = *at(t).segmented;
    s.inputs = {t};
    const int out = add(std::move(p));
    s.outputs = {out};
    if (at(t).scale >= 0 && at(at(t).scale).segmented) {
      Tensor ps = at(at(t).scale);
      ps.name += ".permuted";
      ps.segmented.reset();
      s.inputs.push_back(at(t).scale);
      const int sid = add(std::move(ps));
      s.outputs.push_back(sid);
      at(out).scale = sid;
    }
    pass.push_back(s);
    return out;
  }

  // High-precision copy of an FP8 operand for a debug fallback GEMM.
  int dequantize(std::vector<Step>& pass, int q) {
    Tensor t = at(q);
    std::string n = t.name;
    const auto pos = n.find(".fp8.");
    t.name = n.substr(0, pos) + ".hp" + n.substr(pos + 8);
    t.type = hp_;
    t.usage = Usage::rowwise;
    t.scaling = Scaling::none;
    t.scale = -1;
    t.segmented.reset();
    Step s;
    s.kind = StepKind::dequantize;
    s.inputs = {q};
    if (at(q).scale >= 0) s.inputs.push_back(at(q).scale);
    s.stats = layer_.debug.stats;
    const int out = add(std::move(t));
    s.outputs = {out};
    pass.push_back(s);
    return out;
  }

  // --- forward -------------------------------------------------------------

  void forward() {
    auto& f = plan_.forward;
    w_ = hp_tensor("w", out_, in_, hp_, true, "weight shard");
    if (layer_.bias) b_ = hp_tensor("b", out_, Dim{"1", 1, 1}, hp_, true, "bias");
    const bool x_gathered = column_ && sp_;
    // What X is needed as: fprop (rowwise) now; wgrad (columnwise) saved.
    Needs x_fwd;
    x_fwd.row = gemm_fp8(GemmRole::fprop) || (fp8_ && x_gathered);
    // save_input = fp8 keeps X's columnwise usage for wgrad (a debug
    // fallback wgrad dequantizes it: high-precision X is not kept).
    x_save_col_ = fp8_ && layer_.save_input == SaveInput::fp8;
    Quantized xq;
    if (chained_in_) {
      Tensor t;
      t.name = name("x.fp8.row");
      t.type = fwd_;
      t.dims = {tokens_in_, in_};
      t.scaling = Scaling::per_tensor;
      t.external = true;
      t.note = "written by '" + layer_.input + "' GEMM with this layer's input scale";
      xq.row = add(t);
      at(xq.row).scale =
          scalar("x.scale_inv", true, "delayed scale, handed to the producer's epilogue");
      xq.amax = scalar("x.amax", true, "amax of the producer's GEMM output");
      delayed_amaxes_.push_back({xq.amax, at(xq.row).sharded() && R_ > 1});
      if (x_save_col_) {
        // Per-tensor: the columnwise copy is the transpose of the chained data.
        xq.col = transpose(f, xq.row);
      }
      x_ = -1;
    } else {
      x_ = hp_tensor("x", tokens_in_, in_, hp_, true,
                     layer_.input.empty() ? "layer input" : "output of '" + layer_.input + "'");
      Needs n = x_fwd;
      n.col = x_save_col_;
      if (n.any()) xq = quantize(f, x_, name("x"), fwd_, false, n);
    }
    x_fp8_row_ = xq.row;
    x_fp8_col_ = xq.col;
    // W: rowwise for fprop, columnwise for dgrad; weights are quantized once.
    Needs wn;
    wn.row = gemm_fp8(GemmRole::fprop);
    wn.col = gemm_fp8(GemmRole::dgrad);
    if (wn.any()) {
      auto wq = quantize(f, w_, name("w"), fwd_, true, wn);
      w_row_ = wq.row;
      w_col_ = wq.col;
    }
    // fprop operands
    int xa = -1;
    if (x_gathered) {
      const int src = fp8_ ? xq.row : x_;
      const int g = all_gather(f, src);
      xa = fp8_ && !gemm_fp8(GemmRole::fprop) ? dequantize(f, g) : g;
    } else {
      xa = gemm_fp8(GemmRole::fprop) ? xq.row : x_;
    }
    const int wa = gemm_fp8(GemmRole::fprop) ? w_row_ : w_;
    Step g;
    g.kind = StepKind::gemm;
    g.role = GemmRole::fprop;
    g.high_precision = !gemm_fp8(GemmRole::fprop);
    g.inputs = {xa, wa};
    const bool epilogue_in_gemm = column_ || R_ == 1;
    if (epilogue_in_gemm) {
      emit_output(g, tokens_all_);
      f.push_back(g);
      return;
    }
    const int partial = hp_tensor("y.partial", tokens_all_, out_, hp_, false);
    g.outputs = {partial};
    f.push_back(g);
    const int reduced = hp_tensor("y.reduced", tokens_out_, out_, hp_, false);
    reduce_partials(f, partial, reduced);
    if (layer_.bias || layer_.activation != Activation::none || chained_out_) {
      Step e;
      e.kind = StepKind::epilogue;
      e.inputs = {reduced};
      emit_output(e, tokens_out_);
      f.push_back(e);
    } else {
      plan_.notes.push_back("output is " + at(reduced).name);
    }
  }

  // The layer's final output written by a GEMM epilogue or an epilogue step:
  // bias, activation (saving the pre-activation for dact), FP8 for a chained
  // delayed-scaling consumer.
  void emit_output(Step& s, const Dim& rows) {
    if (layer_.bias) {
      s.bias = true;
      s.inputs.push_back(b_);
    }
    s.activation = layer_.activation;
    if (layer_.activation != Activation::none) {
      z_ = hp_tensor("z", rows, out_, hp_, false);  // saved for dact
    }
    if (chained_out_) {
      const int cs = scalar("y.scale_inv", true, "input scale of '" + consumer_->name + "'");
      s.inputs.push_back(cs);
      Tensor y;
      y.name = name("y.fp8.row");
      y.type = to_elem(consumer_->recipe.forward);
      y.dims = {rows, out_};
      y.scaling = Scaling::per_tensor;
      y.scale = cs;
      s.outputs.push_back(add(y));
      s.outputs.push_back(scalar("y.amax", false));
      s.fused_amax = true;
    } else {
      s.outputs.push_back(hp_tensor("y", rows, out_, to_elem(layer_.output_dtype), false));
    }
    if (z_ >= 0) s.outputs.push_back(z_);
  }

  // --- backward ------------------------------------------------------------

  void backward() {
    auto& b = plan_.backward;
    const bool act = layer_.activation != Activation::none;
    const std::string gname = act ? "dz" : "dy";
    dy_ = hp_tensor("dy", tokens_out_, out_, hp_, true, "gradient of the output");
    const bool dy_gathered = !column_ && sp_;
    // dY: rowwise for dgrad, columnwise for wgrad. When dY must be gathered
    // a fallback GEMM dequantizes the gathered FP8 copy, so the usages stay.
    Needs dn;
    dn.row = gemm_fp8(GemmRole::dgrad) || (fp8_ && dy_gathered);
    dn.col = gemm_fp8(GemmRole::wgrad) || (fp8_ && dy_gathered);
    int db = -1;
    int dy_row = -1, dy_col = -1;
    const bool dbias_local = layer_.bias;
    if (dn.any()) {
      Needs local = dn;
      if (dy_gathered && per_tensor(kind_)) local = Needs{true, false};  // transpose after gather
      if (!dy_gathered && !gemm_fp8(GemmRole::dgrad)) local.row = false;
      if (!dy_gathered && !gemm_fp8(GemmRole::wgrad)) local.col = false;
      auto q = quantize(b, dy_, name(gname), bwd_, false, local, act ? z_ : -1, dbias_local, &db);
      dy_row = q.row;
      dy_col = q.col;
    }
    int dy_hp = dy_;
    if ((act || layer_.bias) && (!dn.any())) {
      // No FP8 copy: dact and dbias in one high-precision pass.
      Step e;
      e.kind = StepKind::epilogue;
      e.inputs = {dy_};
      if (act) e.inputs.push_back(z_);
      e.fused_dact = act;
      e.fused_dbias = layer_.bias;
      dy_hp = hp_tensor(gname, tokens_out_, out_, hp_, false);
      e.outputs = {dy_hp};
      if (layer_.bias) {
        db = hp_tensor("db", out_, Dim{"1", 1, 1}, hp_, false);
        e.outputs.push_back(db);
      }
      b.push_back(e);
    } else if (act && dn.any() && !(gemm_fp8(GemmRole::dgrad) && gemm_fp8(GemmRole::wgrad)) &&
               !dy_gathered) {
      // A fallback GEMM needs dact applied in high precision as well.
      Step e;
      e.kind = StepKind::epilogue;
      e.inputs = {dy_, z_};
      e.fused_dact = true;
      dy_hp = hp_tensor(gname, tokens_out_, out_, hp_, false);
      e.outputs = {dy_hp};
      b.push_back(e);
    }
    if (db >= 0 && dy_gathered) {
      // The local tokens give a partial bias gradient: sum it over the group.
      Step r;
      r.kind = StepKind::all_reduce;  // a sum of partials, no dim split
      r.inputs = {db};
      const int out = hp_tensor("db.reduced", out_, Dim{"1", 1, 1}, hp_, false);
      r.outputs = {out};
      r.bytes_per_rank = all_reduce_bytes(at(db).bytes(), R_);
      b.push_back(r);
    }
    if (dy_gathered) {
      if (fp8_) {
        if (dy_row >= 0) dy_row = all_gather(b, dy_row);
        if (per_tensor(kind_))
          dy_col = transpose(b, dy_row);
        else if (dy_col >= 0)
          dy_col = all_gather(b, dy_col);
      } else {
        dy_hp = all_gather(b, dy_hp);
      }
    }
    // dgrad: dX = dY W
    {
      Step g;
      g.kind = StepKind::gemm;
      g.role = GemmRole::dgrad;
      g.high_precision = !gemm_fp8(GemmRole::dgrad);
      int a = dy_hp;
      if (gemm_fp8(GemmRole::dgrad))
        a = dy_row;
      else if (fp8_ && dy_gathered)
        a = dequantize(b, dy_row);
      g.inputs = {a, gemm_fp8(GemmRole::dgrad) ? w_col_ : w_};
      if (column_ && R_ > 1) {
        const int partial =
            hp_tensor("dx.partial", tokens_all_, Dim{"in", layer_.in, layer_.in}, hp_, false);
        g.outputs = {partial};
        b.push_back(g);
        reduce_partials(b, partial, hp_tensor("dx", tokens_in_, in_, hp_, false));
      } else {
        g.outputs = {hp_tensor("dx", column_ ? tokens_in_ : tokens_all_, in_, hp_, false)};
        b.push_back(g);
      }
    }
    // wgrad: dW = dY^T X, K = tokens.
    {
      Step g;
      g.kind = StepKind::gemm;
      g.role = GemmRole::wgrad;
      g.high_precision = !gemm_fp8(GemmRole::wgrad);
      int a = dy_hp;
      if (gemm_fp8(GemmRole::wgrad))
        a = k_operand(b, dy_col, g.segmented_k);
      else if (fp8_ && dy_gathered)
        a = dequantize(b, dy_col);
      const int xo = wgrad_x(b, g.segmented_k);
      g.inputs = {a, xo};
      g.outputs = {hp_tensor("dw", out_, in_, ElemType::fp32, false)};
      b.push_back(g);
    }
  }

  // X as wgrad reads it.
  int wgrad_x(std::vector<Step>& b, bool& segmented_k) {
    const bool x_gathered = column_ && sp_;
    const bool fp8_wgrad = gemm_fp8(GemmRole::wgrad);
    if (!fp8_) return x_gathered ? all_gather(b, x_) : x_;
    int col = -1;
    if (layer_.save_input == SaveInput::fp8 || chained_in_) {
      col = x_fp8_col_;
    } else {
      // save_input = original: quantize only the columnwise usage, from the
      // saved high-precision X (the TE debug-quantizer report's case).
      if (!fp8_wgrad && !x_gathered) return x_;
      // The scale is the forward's (same amax, already reduced), so the
      // columnwise copy matches the rowwise one and no new collective runs.
      const bool forward_quantized = x_fp8_row_ >= 0;
      auto q = quantize(b, x_, name("x"), fwd_, false, Needs{false, true}, -1, false, nullptr,
                        /*record_amax=*/!forward_quantized, forward_quantized ? x_amax_ : -1);
      col = q.col;
    }
    if (x_gathered) col = all_gather(b, col);
    if (fp8_wgrad) {
      bool seg = false;
      const int k = k_operand(b, col, seg);
      // Both operands of a segmented-K GEMM must agree; dY is contiguous here
      // unless it came from a gather too.
      segmented_k = segmented_k || seg;
      return k;
    }
    return dequantize(b, col);
  }

  // --- update (delayed only) ---------------------------------------------

  void update() {
    if (kind_ != RecipeKind::delayed) return;
    auto& u = plan_.update;
    Step s;
    s.kind = StepKind::scale_update;
    for (auto [amax, sharded] : delayed_amaxes_) {
      int a = amax;
      if (sharded) a = amax_all_reduce(u, amax);
      s.inputs.push_back(a);
      std::string n = at(amax).name.substr(layer_.name.size() + 1);
      n = n.substr(0, n.size() - 5) + ".scale_inv.next";
      s.outputs.push_back(scalar(n, false));
    }
    if (!s.inputs.empty()) u.push_back(s);
  }

  const Spec& spec_;
  const Layer& layer_;
  LayerPlan plan_;
  std::uint32_t R_;
  std::uint64_t T_;
  RecipeKind kind_;
  bool fp8_, sp_, column_;
  ElemType hp_, fwd_, bwd_;
  bool fallback_[3] = {false, false, false};
  Dim tokens_in_, tokens_out_, tokens_all_, in_, out_;
  bool chained_in_ = false, chained_out_ = false;
  const Layer* consumer_ = nullptr;
  bool x_save_col_ = false;
  int x_ = -1, w_ = -1, b_ = -1, z_ = -1, dy_ = -1;
  int x_amax_ = -1;  // current: the (reduced) amax forward quantized X with
  int x_fp8_row_ = -1, x_fp8_col_ = -1, w_row_ = -1, w_col_ = -1;
  std::vector<std::pair<int, bool>> delayed_amaxes_;
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

}  // namespace

Plan plan_spec(const Spec& spec, const PlanOptions& options) {
  if (options.tokens == 0) throw PlanError("--tokens must be at least 1");
  Plan plan;
  plan.tokens = options.tokens;
  plan.ranks = options.ranks.value_or(1);
  for (const auto& layer : spec.layers) {
    const std::uint32_t r = layer_ranks(layer, options);
    plan.ranks = std::max(plan.ranks, r);
    plan.layers.push_back(LayerPlanner(spec, layer, r, options.tokens).run());
  }
  if (auto errors = check_plan(plan); !errors.empty()) {
    std::string message = "internal error: the planner produced an invalid plan:";
    for (const auto& e : errors) message += "\n  " + e;
    throw PlanError(message);
  }
  return plan;
}

}  // namespace fp8c
