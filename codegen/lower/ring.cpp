#include "codegen/lower/ring.hpp"

#include <algorithm>

namespace fp8c {
namespace {

bool reads(const Step& s, int id) {
  const std::vector<int> in = s.inputs();
  return id != kNoTensor && std::find(in.begin(), in.end(), id) != in.end();
}

// The steps of `pass` that read `id` (or its scales `scales`).
std::vector<int> readers(const std::vector<Step>& pass, int id, int scales = kNoTensor) {
  std::vector<int> r;
  for (std::size_t i = 0; i < pass.size(); ++i)
    if (reads(pass[i], id) || reads(pass[i], scales)) r.push_back(static_cast<int>(i));
  return r;
}

class Chooser {
 public:
  Chooser(const LayerPlan& plan, const std::vector<Step>& pass) : plan_(plan), pass_(pass) {}

  RingChoice run() {
    for (std::size_t c = 0; c < pass_.size(); ++c) {
      const Step& s = pass_[c];
      std::string why;
      Ring ring;
      if (const auto* ag = s.as<AllGatherStep>())
        why = gather(static_cast<int>(c), *ag, ring);
      else if (const auto* rs = s.as<ReduceScatterStep>())
        why = scatter(static_cast<int>(c), *rs, ring);
      else
        continue;
      if (why.empty() && ring_of(out_.rings, ring.gemm))
        why = "its GEMM (step " + std::to_string(ring.gemm) + ") is already another ring's";
      if (why.empty())
        out_.rings.push_back(ring);
      else
        out_.bulk.push_back(plan_.tensor(s.inputs().at(0)).name + "'s " +
                            std::string(to_string(s.kind())) + " runs as bulk: " + why);
    }
    return std::move(out_);
  }

 private:
  const Tensor& t(int id) const { return plan_.tensor(id); }

  static std::string block_scaled(const Tensor& op) {
    return op.name + " is block-scaled (" + std::string(to_string(op.scaling)) +
           "): a rank chunk of its block scales, as the GEMM reads them, is not contiguous";
  }

  std::string gather(int c, const AllGatherStep& ag, Ring& ring) const {
    const std::vector<int> r = readers(pass_, ag.out, ag.scales_out);
    const Tensor& gathered = t(ag.out);
    if (r.size() != 1)
      return gathered.name + " is read by " + std::to_string(r.size()) +
             " steps, not by one GEMM alone";
    if (const Step& only = pass_[static_cast<std::size_t>(r[0])]; !only.as<GemmStep>())
      return gathered.name + " is read by a " + std::string(to_string(only.kind())) +
             " step, not a GEMM";
    const int gi = r[0];
    const auto& g = *pass_[static_cast<std::size_t>(gi)].as<GemmStep>();
    for (int op : {g.a, g.b})
      if (t(op).block_scaled()) return block_scaled(t(op));
    ring.collective = c;
    ring.gemm = gi;
    if (g.segmented_k && gathered.segmented && (g.a == ag.out || g.b == ag.out)) {
      ring.form = RingForm::gather_k;
      return {};
    }
    // Rows of A, K innermost (fprop and dgrad contract over dim 1).
    if (g.a == ag.out && g.role != GemmRole::wgrad && !g.segmented_k &&
        gathered.usage == Usage::rowwise && ag.dim == 0) {
      // A GEMM sets its output's amax over what it wrote: chunk calls would
      // each set it over their rows.
      if (g.epilogue.out_amax != kNoTensor)
        return "its GEMM takes the amax of its whole FP8 output (" + t(g.out).name + ")";
      ring.form = RingForm::gather_rows;
      return {};
    }
    return "its GEMM reads " + gathered.name + " neither by rows nor by rank segments of K";
  }

  std::string scatter(int c, const ReduceScatterStep& rs, Ring& ring) const {
    const Tensor& partial = t(rs.in);
    int gi = -1;
    for (int i = c - 1; i >= 0 && gi < 0; --i) {
      const auto* g = pass_[static_cast<std::size_t>(i)].as<GemmStep>();
      if (g && g->out == rs.in) gi = i;
    }
    if (gi < 0) return partial.name + " is not a GEMM output of this pass";
    const auto& g = *pass_[static_cast<std::size_t>(gi)].as<GemmStep>();
    const std::vector<int> r = readers(pass_, rs.in);
    if (r.size() != 1) return partial.name + " is read by " + std::to_string(r.size()) + " steps";
    for (int op : {g.a, g.b})
      if (t(op).block_scaled()) return block_scaled(t(op));
    if (g.role == GemmRole::wgrad || g.segmented_k || g.accumulate || g.epilogue.any() ||
        rs.dim != 0 || partial.usage != Usage::rowwise || t(g.a).usage != Usage::rowwise)
      return "its GEMM does not write " + partial.name + " by rows of its A";
    ring.form = RingForm::scatter_rows;
    ring.collective = c;
    ring.gemm = gi;
    return {};
  }

  const LayerPlan& plan_;
  const std::vector<Step>& pass_;
  RingChoice out_;
};

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

}  // namespace

RingChoice choose_rings(const Layer& layer, const LayerPlan& plan, const std::vector<Step>& pass) {
  if (layer.layout.overlap != Overlap::ring || plan.ranks < 2) return {};
  return Chooser(plan, pass).run();
}

const Ring* ring_of(const std::vector<Ring>& rings, int step) {
  for (const Ring& r : rings)
    if (step >= 0 && (r.collective == step || r.gemm == step)) return &r;
  return nullptr;
}

int gathered_segment(int rank, int ranks, int shifts) {
  return mod(rank - shifts, ranks);
}

int scattered_chunk(int rank, int ranks, int step) {
  return mod(rank - 1 - step, ranks);
}

std::string_view to_string(RingForm f) {
  switch (f) {
    case RingForm::none:
      return "none";
    case RingForm::gather_rows:
      return "gather_rows";
    case RingForm::gather_k:
      return "gather_k";
    case RingForm::scatter_rows:
      return "scatter_rows";
  }
  return "?";
}

}  // namespace fp8c
