// Rules, each with the bug it prevents:
// - inputs exist before use: a step reading a buffer nobody wrote;
// - GEMM operands follow the TN rule and agree on K: an FP8 GEMM reading the
//   wrong usage ("missing column-wise usage") or mismatched shapes; a
//   high-precision (fallback) GEMM reads no FP8 data, so what it computes
//   does not depend on how many ranks quantized what;
// - a gather's dim is its input's sharded dim, and a gather along a dim that
//   is not the physical outermost yields rank segments that only a permute
//   or a segmented-K GEMM may read: TransformerEngine issue #530, where the
//   transposed copy of a sequence-parallel activation was gathered as if
//   contiguous and wgrad read scrambled rows;
// - transposes only for per-tensor scaling: block and MX columnwise data has
//   its own scales and must come from high precision;
// - no quantize produces a usage nobody reads: the debug path of TE PR #1963
//   that produced and gathered rowwise data where only columnwise was needed;
// - per-tensor scales of sharded tensors come from an amax reduced over the
//   group, so every rank (and the one-rank run) uses the same scale.
#include "codegen/plan/plan_check.hpp"

#include <array>
#include <map>
#include <set>

namespace fp8c {
namespace {

struct StepRef {
  const char* pass;
  std::size_t index;
  const Step* step;
};

std::string where(const LayerPlan& l, const StepRef& r) {
  return "layer '" + l.layer + "' " + r.pass + " step " + std::to_string(r.index) + " (" +
         std::string(to_string(r.step->kind())) + ")";
}

std::vector<StepRef> all_steps(const LayerPlan& l) {
  std::vector<StepRef> steps;
  for (std::size_t i = 0; i < l.forward.size(); ++i) steps.push_back({"forward", i, &l.forward[i]});
  for (std::size_t i = 0; i < l.backward.size(); ++i)
    steps.push_back({"backward", i, &l.backward[i]});
  for (std::size_t i = 0; i < l.update.size(); ++i) steps.push_back({"update", i, &l.update[i]});
  return steps;
}

// The logical dim each GEMM operand contracts over.
int k_dim(GemmRole role, int operand) {
  switch (role) {
    case GemmRole::fprop:
      return 1;  // X[tokens,in], W[out,in]: K = in
    case GemmRole::dgrad:
      return operand == 0 ? 1 : 0;  // dY[tokens,out], W[out,in]: K = out
    case GemmRole::wgrad:
      return 0;  // dY, X: K = tokens
  }
  return 0;
}

void check_gemm(const LayerPlan& l, const StepRef& r, const GemmStep& s,
                std::vector<std::string>& errors) {
  std::uint64_t k[2] = {0, 0};
  const int operands[2] = {s.a, s.b};
  for (int o = 0; o < 2; ++o) {
    const Tensor& t = l.tensor(operands[o]);
    const int kd = k_dim(s.role, o);
    k[o] = t.dims[static_cast<std::size_t>(kd)].local;
    if (s.high_precision && t.is_fp8())
      errors.push_back(where(l, r) + ": high-precision " + std::string(to_string(s.role)) +
                       " reads FP8 tensor " + t.name);
    if (!s.high_precision && !t.is_fp8())
      errors.push_back(where(l, r) + ": FP8 " + std::string(to_string(s.role)) +
                       " reads high-precision tensor " + t.name);
    if (t.is_fp8() && t.inner_dim() != kd) {
      const Usage want = kd == 1 ? Usage::rowwise : Usage::columnwise;
      errors.push_back(where(l, r) + ": " + std::string(to_string(s.role)) + " operand " + t.name +
                       " is " + std::string(to_string(t.usage)) +
                       ", but the TN FP8 GEMM needs K ('" +
                       t.dims[static_cast<std::size_t>(kd)].name +
                       "') innermost: " + std::string(to_string(want)));
    }
    if (t.segmented && !(s.segmented_k && *t.segmented == kd))
      errors.push_back(where(l, r) + ": operand " + t.name + " holds rank segments along '" +
                       t.dims[static_cast<std::size_t>(*t.segmented)].name +
                       "' but the GEMM does not read a segmented K there: it would read "
                       "scrambled data");
  }
  if (k[0] != k[1])
    errors.push_back(where(l, r) + ": K extents differ: " + std::to_string(k[0]) + " vs " +
                     std::to_string(k[1]));
}

void check_gather_pair(const LayerPlan& l, const StepRef& r, int dim, int in_id, int out_id,
                       const std::multimap<int, const Step*>& consumers,
                       std::vector<std::string>& errors) {
  const Tensor& in = l.tensor(in_id);
  const Tensor& out = l.tensor(out_id);
  if (dim < 0 || dim > 1 || !in.dims[static_cast<std::size_t>(dim)].sharded()) {
    errors.push_back(where(l, r) + ": gathers dim " + std::to_string(dim) + " of " + in.name +
                     ", which is not its sharded dim");
    return;
  }
  const Dim& d = in.dims[static_cast<std::size_t>(dim)];
  if (dim == in.outer_dim()) {
    if (out.segmented)
      errors.push_back(where(l, r) + ": " + out.name + " is marked segmented, but '" + d.name +
                       "' is the outermost dim of " + in.name + ": the gather is contiguous");
    return;
  }
  const std::string layout = "[ranks][" + in.dims[static_cast<std::size_t>(in.outer_dim())].name +
                             "][" + d.name + "/ranks]";
  if (out.segmented != dim) {
    errors.push_back(where(l, r) + ": " + in.name + " is " + std::string(to_string(in.usage)) +
                     ", so the gathered dim '" + d.name +
                     "' is its physical inner dim; all-gather concatenates along the outermost "
                     "dim, so " +
                     out.name + " is laid out " + layout + " and must be marked segmented along '" +
                     d.name + "', or its consumers read scrambled data");
    return;
  }
  auto range = consumers.equal_range(out.id);
  for (auto it = range.first; it != range.second; ++it) {
    const Step& c = *it->second;
    const GemmStep* g = c.as<GemmStep>();
    const bool ok = c.kind() == StepKind::permute || (g && g->segmented_k);
    if (!ok)
      errors.push_back(where(l, r) + ": segmented " + out.name + " (" + layout + ", gathered '" +
                       d.name + "') is read by a " + std::string(to_string(c.kind())) +
                       " that expects contiguous '" + d.name + "': scrambled data");
  }
}

// A per-tensor FP8 output of a sharded source uses a scale every rank
// shares: current, an amax reduced over the group; delayed, a scale whose
// amax the update reduces.
bool scale_agreed(const LayerPlan& l, const QuantizeStep& s,
                  const std::map<int, const Step*>& producer) {
  if (s.amax_in != kNoTensor) {
    auto it = producer.find(s.amax_in);
    return it != producer.end() && it->second->kind() == StepKind::amax_all_reduce;
  }
  const int d = l.delayed_index_of_scale(s.scale);
  if (d < 0) return false;
  const DelayedTensor& e = l.delayed[static_cast<std::size_t>(d)];
  auto it = producer.find(e.amax_reduced);
  return it != producer.end() && it->second->kind() == StepKind::amax_all_reduce;
}

}  // namespace

std::vector<std::string> check_layer_plan(const LayerPlan& l) {
  std::vector<std::string> errors;
  const auto steps = all_steps(l);
  auto valid = [&](int id) { return id >= 0 && static_cast<std::size_t>(id) < l.tensors.size(); };
  for (std::size_t i = 0; i < l.tensors.size(); ++i)
    if (l.tensors[i].id != static_cast<int>(i))
      errors.push_back("layer '" + l.layer + "': tensor " + l.tensors[i].name + " has id " +
                       std::to_string(l.tensors[i].id) + " at index " + std::to_string(i));
  // Producers, consumers, order.
  std::set<int> available;
  for (const auto& t : l.tensors)
    if (t.external) available.insert(t.id);
  std::multimap<int, const Step*> consumers;
  std::map<int, const Step*> producer;
  for (const auto& r : steps) {
    for (int id : r.step->inputs()) {
      if (!valid(id)) {
        errors.push_back(where(l, r) + ": reads unknown tensor id " + std::to_string(id));
        continue;
      }
      consumers.emplace(id, r.step);
      if (!available.count(id))
        errors.push_back(where(l, r) + ": reads " + l.tensor(id).name +
                         " before any step produces it");
    }
    for (int id : r.step->outputs()) {
      if (!valid(id)) {
        errors.push_back(where(l, r) + ": writes unknown tensor id " + std::to_string(id));
        continue;
      }
      if (producer.count(id) || l.tensor(id).external)
        errors.push_back(where(l, r) + ": writes " + l.tensor(id).name + ", already produced");
      producer[id] = r.step;
      available.insert(id);
    }
  }
  for (const DelayedTensor& d : l.delayed)
    for (int id : {d.scale, d.amax, d.amax_reduced, d.next_scale})
      if (id != kNoTensor && !valid(id))
        errors.push_back("layer '" + l.layer + "': delayed state of '" + d.key() +
                         "' names unknown tensor id " + std::to_string(id));
  if (!errors.empty()) return errors;
  for (const auto& r : steps) {
    const Step& s = *r.step;
    if (const auto* g = s.as<GemmStep>()) {
      check_gemm(l, r, *g, errors);
      if (const int c = g->epilogue.out_columnwise; c != kNoTensor) {
        // The same FP8 bytes transposed: only per-tensor data is its own
        // transpose's (one scale for both).
        const Tensor& out = l.tensor(g->out);
        const Tensor& col = l.tensor(c);
        if (!out.is_fp8() || out.scaling != Scaling::per_tensor || col.type != out.type ||
            col.scale != out.scale || col.dims != out.dims || out.usage != Usage::rowwise ||
            col.usage != Usage::columnwise)
          errors.push_back(where(l, r) + ": " + col.name + " is not the columnwise copy of " +
                           out.name + " (per-tensor FP8, same type, scale and dims)");
      }
      const OutputEpilogue& e = g->epilogue;
      if (e.dact != Activation::none || e.dbias != kNoTensor) {
        // The backward epilogue (a consumer's dgrad handing its producer
        // dz): act' needs the z it reads, and the store is the producer's FP8.
        if (g->role != GemmRole::dgrad || e.bias != kNoTensor || e.activation != Activation::none ||
            e.pre_activation != kNoTensor)
          errors.push_back(where(l, r) +
                           ": dact / dbias belong to a dgrad's epilogue, with no bias or "
                           "activation of its own");
        if (!l.tensor(g->out).is_fp8() || e.out_scale == kNoTensor || e.out_amax == kNoTensor)
          errors.push_back(where(l, r) + ": the handed dz is FP8 with its scale and amax");
      }
      if ((e.dact != Activation::none) != (e.dact_input != kNoTensor))
        errors.push_back(where(l, r) +
                         ": dact without the pre-activation it reads, or the "
                         "reverse");
    } else if (const auto* e = s.as<EpilogueStep>(); e && e->epilogue.out_columnwise != kNoTensor) {
      // Its kernel writes rows: a columnwise copy would be left unwritten.
      errors.push_back(where(l, r) + ": an epilogue step writes no columnwise copy (" +
                       l.tensor(e->epilogue.out_columnwise).name + "); only a GEMM does");
    } else if (e && (e->epilogue.dact != Activation::none || e->epilogue.dbias != kNoTensor)) {
      errors.push_back(where(l, r) +
                       ": an epilogue step applies no dact / dbias (a GEMM's or a grad "
                       "epilogue step's do)");
    } else if (const auto* g = s.as<AllGatherStep>()) {
      if (l.ranks <= 1) errors.push_back(where(l, r) + ": all_gather on a single rank");
      check_gather_pair(l, r, g->dim, g->in, g->out, consumers, errors);
      if (g->scales_in != kNoTensor)
        check_gather_pair(l, r, g->dim, g->scales_in, g->scales_out, consumers, errors);
    } else if (const auto* t = s.as<TransposeStep>()) {
      if (l.tensor(t->in).scaling != Scaling::per_tensor)
        errors.push_back(where(l, r) + ": transposes " + l.tensor(t->in).name + " with " +
                         std::string(to_string(l.tensor(t->in).scaling)) +
                         " scaling; only per-tensor columnwise data is the transpose of "
                         "rowwise: quantize columnwise from high precision");
    } else if (const auto* q = s.as<QuantizeStep>()) {
      if (q->rowwise == kNoTensor && q->columnwise == kNoTensor)
        errors.push_back(where(l, r) + ": quantizes no usage");
      const Tensor& src = l.tensor(q->src);
      for (int id : {q->rowwise, q->columnwise}) {
        if (id == kNoTensor) continue;
        const Tensor& t = l.tensor(id);
        if (!consumers.count(id))
          errors.push_back(where(l, r) + ": produces " + t.name + " (" +
                           std::string(to_string(t.usage)) + ") which no step reads");
        if (t.scaling != Scaling::per_tensor || l.ranks <= 1 || !src.sharded()) continue;
        if (!scale_agreed(l, *q, producer))
          errors.push_back(where(l, r) + ": " + t.name + " is quantized from sharded " + src.name +
                           " with a per-tensor scale whose amax is not reduced (MAX) over the " +
                           std::to_string(l.ranks) + " ranks: ranks would use different scales");
      }
    } else if (const auto* p = s.as<PermuteStep>()) {
      for (int id : {p->in, p->scales_in})
        if (id != kNoTensor && !l.tensor(id).segmented)
          errors.push_back(where(l, r) + ": permutes " + l.tensor(id).name +
                           ", which is not segmented");
    }
  }
  return errors;
}

std::vector<std::string> check_plan(const Plan& plan) {
  std::vector<std::string> errors;
  for (const auto& l : plan.layers) {
    auto e = check_layer_plan(l);
    errors.insert(errors.end(), e.begin(), e.end());
  }
  // A columnwise copy handed along a chain is some layer's columnwise input,
  // in the form its producer writes it (layer plans do not name their
  // neighbours: the shape and type must match).
  // Extents only: the producer's "out" is the consumer's "in".
  const auto extents = [](const Tensor& t) {
    return std::array<std::uint64_t, 4>{t.dims[0].local, t.dims[0].global, t.dims[1].local,
                                        t.dims[1].global};
  };
  for (const auto& p : plan.layers) {
    if (p.io.y_fp8_col == kNoTensor) continue;
    const Tensor& out = p.tensor(p.io.y_fp8_col);
    int readers = 0;
    for (const auto& c : plan.layers) {
      if (c.io.x_fp8_col == kNoTensor || c.io.x_fp8 == kNoTensor) continue;
      const Tensor& in = c.tensor(c.io.x_fp8_col);
      if (extents(in) == extents(out) && in.type == out.type) ++readers;
    }
    if (readers == 0)
      errors.push_back("layer '" + p.layer + "' writes " + p.tensor(p.io.y_fp8_col).name +
                       ", which no layer reads as its columnwise FP8 input");
  }
  // FP8 dz handed from a consumer's dgrad to its producer: some layer takes
  // it as its gradient, in the form it is written.
  for (const auto& c : plan.layers) {
    if (c.io.dx_fp8_col == kNoTensor) continue;
    const Tensor& row = c.tensor(c.io.dx);
    int readers = 0;
    for (const auto& p : plan.layers) {
      if (p.io.dy_fp8_col == kNoTensor) continue;
      const Tensor& in = p.tensor(p.io.dy);
      if (extents(in) == extents(row) && in.type == row.type &&
          (p.io.dy_db == kNoTensor) == (c.io.dx_db == kNoTensor))
        ++readers;
    }
    if (readers == 0)
      errors.push_back("layer '" + c.layer + "' hands " + row.name +
                       " to a producer, but no layer takes it as its FP8 gradient");
  }
  for (const auto& p : plan.layers) {
    if (p.io.dy_fp8_col == kNoTensor) continue;
    const Tensor& in = p.tensor(p.io.dy);
    int writers = 0;
    for (const auto& c : plan.layers)
      if (c.io.dx_fp8_col != kNoTensor && extents(c.tensor(c.io.dx)) == extents(in) &&
          c.tensor(c.io.dx).type == in.type)
        ++writers;
    if (writers == 0)
      errors.push_back("layer '" + p.layer + "' takes " + in.name +
                       " as its FP8 gradient, but no layer's dgrad writes it");
  }
  return errors;
}

}  // namespace fp8c
