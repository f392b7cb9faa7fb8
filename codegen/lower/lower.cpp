// Plan -> lowered layer: each typed step's launches, GEMM calls and
// collectives on the target's GEMM backend (lowered.hpp).
#include <algorithm>
#include <cstdio>
#include <optional>

#include "codegen/lower/lowered.hpp"
#include "codegen/lower/schedule.hpp"
#include "codegen/plan/overloaded.hpp"

namespace fp8c {
namespace {

std::uint64_t round_up(std::uint64_t v, std::uint64_t to) {
  return (v + to - 1) / to * to;
}

class Lowering {
 public:
  Lowering(const Layer& layer, const LayerPlan& plan, const LowerOptions& options)
      : layer_(layer), plan_(plan), options_(options) {
    out_.layer = plan.layer;
    out_.ranks = plan.ranks;
    out_.weight_cache = layer.weight_cache;
  }

  LoweredLayer run() {
    nan_verdict();
    lower_pass(plan_.forward, out_.forward);
    rings(plan_.forward, out_.forward);
    lower_pass(plan_.backward, out_.backward);
    rings(plan_.backward, out_.backward);
    lower_pass(plan_.update, out_.update);
    out_.forward_order = schedule_pass(plan_.forward, out_.forward, options_.side_stream);
    out_.backward_order = schedule_pass(plan_.backward, out_.backward, options_.side_stream);
    schedule_pass(plan_.update, out_.update, false);
    mark_weight_only();
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
                note_overlap();
              },
          },
          s.op);
      into.push_back(std::move(l));
    }
  }

  // Forward and backward steps that depend on the weight alone
  // (LoweredStep::weight_only). A tensor is the weight's when it is the
  // weight or a weight-only step made it; one that no forward or backward
  // step makes and the caller does not hand in (the delayed scales the
  // update writes) is neutral; anything else (x, dy, the bias, GEMM
  // outputs) is not. A step is weight-only when it is no GEMM, reads at
  // least one tensor of the weight's and only those and neutral ones. A
  // collective of that kind (the weight's amax all-reduced under current
  // scaling) makes tensors of the weight's but is not skipped: a rank that
  // casts again while another keeps its cast (a weight that moved on one
  // rank only) must not leave the ranks' collectives out of step, and
  // all-reducing an amax nobody changed gives the value it had.
  void mark_weight_only() {
    if (plan_.io.w == kNoTensor) return;
    const LayerIo& io = plan_.io;
    const auto callers = [&](int id) {
      return id == io.x || id == io.x_fp8 || id == io.x_amax || id == io.x_fp8_col || id == io.b ||
             id == io.dy || id == io.y_scale;
    };
    std::vector<bool> made(plan_.tensors.size(), false), weights(plan_.tensors.size(), false);
    for (const auto* pass : {&plan_.forward, &plan_.backward})
      for (const Step& s : *pass)
        for (int id : s.outputs()) made[static_cast<std::size_t>(id)] = true;
    weights[static_cast<std::size_t>(plan_.io.w)] = true;
    int marked = 0;
    for (const auto& [steps, lowered] :
         {std::pair{&plan_.forward, &out_.forward}, std::pair{&plan_.backward, &out_.backward}})
      for (std::size_t i = 0; i < steps->size(); ++i) {
        const Step& s = (*steps)[i];
        if (s.kind() == StepKind::gemm) continue;
        bool reads_weight = false, only = true;
        for (int id : s.inputs()) {
          const auto k = static_cast<std::size_t>(id);
          if (weights[k])
            reads_weight = true;
          else if (made[k] || callers(id))
            only = false;
        }
        if (!reads_weight || !only || s.outputs().empty()) continue;
        // What it makes is the weight's either way (a collective of the
        // weight's gives what it gave before when nobody changed its input).
        for (int id : s.outputs()) weights[static_cast<std::size_t>(id)] = true;
        if (s.is_collective()) continue;
        (*lowered)[i].weight_only = true;
        ++marked;
      }
    if (marked && layer_.weight_cache)
      note_once("weight_cache = true: the " + std::to_string(marked) +
                " weight-only steps are skipped while the weight's version is unchanged "
                "(LayerInputs::w_version)");
  }

  // overlap = ring: each collective that runs as a ring is marked, with
  // its GEMM (ring.hpp); those that cannot say why in the notes.
  void rings(const std::vector<Step>& steps, std::vector<LoweredStep>& lowered) {
    const RingChoice choice = choose_rings(layer_, plan_, steps);
    for (const std::string& why : choice.bulk) note_once("overlap = ring: " + why);
    for (const Ring& r : choice.rings) {
      LoweredStep& c = lowered[static_cast<std::size_t>(r.collective)];
      LoweredStep& g = lowered[static_cast<std::size_t>(r.gemm)];
      for (auto& a : c.actions)
        if (auto* call = std::get_if<CollectiveCall>(&a)) call->ring_gemm = r.gemm;
      for (auto& a : g.actions)
        if (auto* call = std::get_if<GemmCall>(&a)) {
          call->ring = r.form;
          call->ring_collective = r.collective;
        }
      if (r.form != RingForm::scatter_rows) continue;
      const auto& rs = *steps[static_cast<std::size_t>(r.collective)].as<ReduceScatterStep>();
      launch(g, LaunchRole::ring_sum, {RingSumKernel{t(rs.in).type}});
      out_.staging.ring_sums =
          std::max(out_.staging.ring_sums, 2 * round_up(t(rs.out).elements() * 4, 256));
    }
  }

  // What `overlap =` does with this layer's collectives, said once.
  void note_overlap() {
    switch (layer_.layout.overlap) {
      case Overlap::none:
        return;
      case Overlap::bulk:
        note_once(
            "overlap = bulk: each collective runs whole on the communication stream, after the "
            "step that writes its input and before the first that reads its output (events); "
            "steps that need neither run under it");
        return;
      case Overlap::ring:
        note_once(
            "overlap = ring: an all-gather read by one GEMM alone (by rows of its A, or by rank "
            "segments of K) and a reduce-scatter of one GEMM's output rows run as rings of "
            "ranks - 1 shifts to the next rank on the communication stream, each rank chunk's "
            "GEMM as soon as its segment is there (a reduce-scatter's chunks summed in fp32 as "
            "they travel, rounded once by their owner); the other collectives as bulk");
        return;
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
      // scales. The block kernel fuses dact (dz = dy * act'(z) in fp32 as
      // it loads) but no dbias: with a dbias, an epilogue kernel makes dz
      // and the dbias partials first, in fp32, and the block kernel
      // quantizes that (one more write and read of dz).
      const bool fused_dact = q.dact != Activation::none && q.dbias == kNoTensor &&
                              (src.type == ElemType::bf16 || src.type == ElemType::fp16) &&
                              q.pre_activation != kNoTensor && t(q.pre_activation).type == src.type;
      const bool staged = (q.dact != Activation::none && !fused_dact) || q.dbias != kNoTensor;
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
      if (fused_dact) b.dact = q.dact;
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

  // Why fp8c's block scales of `op` (a GEMM operand, K innermost) are not
  // what cuBLASLt's block-scaled GEMM reads, or "" when they are (the rules
  // are runtime/gemm/cublaslt_requirements.hpp's, on the plan's shapes).
  std::string block_operand_problem(const Tensor& op) const {
    const auto outer = static_cast<std::size_t>(op.outer_dim());
    const auto inner = static_cast<std::size_t>(op.inner_dim());
    const std::uint64_t rows = op.dims[outer].local, k = op.dims[inner].local;
    const std::string n = op.name;
    // Partial K blocks are left to the dequantize path: cuBLASLt's block
    // modes are checked here only on whole ones.
    if (k % 128 != 0) return n + " has K = " + std::to_string(k) + ", not a multiple of 128";
    if (std::string p = block_parts_problem(op); !p.empty()) return p;
    if (op.scaling == Scaling::block_1x128 && k / 128 > 1 && rows % 4 != 0)
      return n + " has " + std::to_string(rows) +
             " rows: a K-block-major 1x128 scale tensor is unambiguous only for a multiple of 4";
    return "";
  }

  // Why block-scaled `op` (K innermost), gathered from rank parts, does not
  // keep whole blocks in each part, or "" when it does: its K blocks, and a
  // 128x128 operand's 128-row blocks, restart at each part. Both GEMM
  // backends read the blocks as one tensor.
  std::string block_parts_problem(const Tensor& op) const {
    const auto outer = static_cast<std::size_t>(op.outer_dim());
    const auto inner = static_cast<std::size_t>(op.inner_dim());
    const std::uint64_t rows = op.dims[outer].local, k = op.dims[inner].local;
    const std::uint32_t k_parts = op.block_segments[inner];
    const std::uint64_t block = inner_block(op.scaling);
    if (k_parts > 1 && (k % k_parts != 0 || (k / k_parts) % block != 0))
      return op.name + "'s K blocks restart at each of its " + std::to_string(k_parts) +
             " rank parts, which are not multiples of " + std::to_string(block);
    const std::uint32_t row_parts = op.block_segments[outer];
    if (op.scaling == Scaling::block_128x128 && row_parts > 1 &&
        (rows % row_parts != 0 || (rows / row_parts) % 128 != 0))
      return op.name + "'s 128-row blocks restart at each of its " + std::to_string(row_parts) +
             " rank parts, which are not multiples of 128";
    return "";
  }

  // Why block-scaled `op` cannot be read one rank segment of K at a time, or
  // "" when it can: each segment needs whole K blocks, and its scales a
  // range the GEMM can address: K-block-major 1x128 scales have it
  // contiguous, 128x128 ones (K blocks innermost) do not; MXFP8 codes are
  // read as rows of a given length (GemmOperand::scale_stride), so a
  // segment's are a column range of them.
  std::string segmented_block_problem(const Tensor& op) const {
    const std::uint64_t k = op.dims[static_cast<std::size_t>(op.inner_dim())].local;
    if (op.scaling == Scaling::block_128x128)
      return op.name + " is 128x128-scaled in a GEMM read one K segment at a time";
    const std::uint64_t block = inner_block(op.scaling);
    if (k % plan_.ranks != 0 || (k / plan_.ranks) % block != 0)
      return "a K segment of " + op.name + " is not a multiple of " + std::to_string(block);
    return "";
  }

  // Why a GEMM of block-scaled operands cannot run on cuBLASLt's block-scaled
  // FP8 GEMM, or "" when it can.
  std::string block_gemm_problem(const GemmStep& g) const {
    const Tensor& a = t(g.a);
    const Tensor& b = t(g.b);
    if (!options_.block_scaled_gemm)
      return options_.no_block_scaled_gemm.empty() ? "the target has no block-scaled FP8 GEMM"
                                                   : options_.no_block_scaled_gemm;
    if (a.scaling == Scaling::mx_1x32 || b.scaling == Scaling::mx_1x32)
      return "cuBLASLt has no MXFP8 (1x32, E8M0) GEMM on Hopper";
    if (!a.block_scaled() || !b.block_scaled())
      return "one operand is block-scaled and the other is not";
    if (a.scaling == Scaling::block_128x128 && b.scaling == Scaling::block_128x128)
      return "cuBLASLt has no 128x128 x 128x128 GEMM";
    if (a.type == ElemType::e5m2 && b.type == ElemType::e5m2)
      return "cuBLASLt has no e5m2 x e5m2 GEMM";
    // A K made of rank segments is read one segment at a time
    // (segmented_block_problem). (Joining the segments into one matrix
    // first, for one GEMM over the whole K, is the alternative; it costs a
    // permute and staging, and has not been measured against this: `fp8c
    // bench` runs one rank.)
    const bool segmented = (a.segmented || b.segmented) && g.segmented_k;
    if ((a.segmented || b.segmented) && !segmented)
      return "an operand is stored as rank segments along a dim the GEMM does not split";
    for (const Tensor* op : {&a, &b}) {
      if (std::string p = block_operand_problem(*op); !p.empty()) return p;
      if (segmented)
        if (std::string p = segmented_block_problem(*op); !p.empty()) return p;
    }
    const OutputEpilogue& e = g.epilogue;
    if (e.out_scale != kNoTensor || e.out_amax != kNoTensor)
      return "the block-scaled GEMM writes no FP8 output or amax";
    if (e.activation != Activation::none && e.pre_activation == kNoTensor)
      return "the activation would need its pre-activation, which the plan does not keep";
    return "";
  }

  // Why a GEMM of FP8 operands cannot run on the generated GEMM
  // (codegen/kernels/fp8_gemm.hpp), or "" when it can. It takes any type
  // pairing, per-tensor or block scales as the quantize kernels write them
  // (1x128 row-major, 128x128 packed, MXFP8's 1x32 E8M0 codes), any K that
  // TMA can stride (a multiple of 16 bytes), and fuses every epilogue.
  std::string generated_gemm_problem(const GemmStep& g) const {
    const Tensor& a = t(g.a);
    const Tensor& b = t(g.b);
    if ((a.scaling == Scaling::mx_1x32) != (b.scaling == Scaling::mx_1x32))
      return "one operand is MXFP8 and the other is not";
    if (a.block_scaled() != b.block_scaled())
      return "one operand is block-scaled and the other is not";
    const bool segmented = (a.segmented || b.segmented) && g.segmented_k;
    if ((a.segmented || b.segmented) && !segmented)
      return "an operand is stored as rank segments along a dim the GEMM does not split";
    for (const Tensor* op : {&a, &b}) {
      const std::uint64_t k = op->dims[static_cast<std::size_t>(op->inner_dim())].local;
      if (k % 16 != 0)
        return op->name + " has K = " + std::to_string(k) +
               ", not a multiple of 16 (TMA's row stride)";
      if (segmented && (k % plan_.ranks != 0 || (k / plan_.ranks) % 16 != 0))
        return "a K segment of " + op->name + " is not a multiple of 16 (TMA's row stride)";
      if (!op->block_scaled()) continue;
      if (std::string p = block_parts_problem(*op); !p.empty()) return p;
      if (segmented)
        if (std::string p = segmented_block_problem(*op); !p.empty()) return p;
    }
    return "";
  }

  // A 1x128 operand's scales in the order cuBLASLt reads, where they differ
  // (one transpose per rank segment of a segmented operand, in one launch);
  // an MXFP8 operand's codes K-block-major, the order the generated GEMM
  // reads fastest (a byte transpose of rows x ceil(K/32) codes).
  void block_scale_layout(LoweredStep& l, LaunchRole role, const Tensor& op) {
    const std::uint64_t rows = op.dims[static_cast<std::size_t>(op.outer_dim())].local;
    if (op.scaling == Scaling::mx_1x32) {
      const std::uint64_t codes =
          (op.dims[static_cast<std::size_t>(op.inner_dim())].local + 31) / 32;
      launch(l, role, {TransposeKernel{1}});
      block_scales_ += round_up(rows * codes, 256);
      return;
    }
    if (op.scaling != Scaling::block_1x128) return;
    const std::uint64_t nb = op.dims[static_cast<std::size_t>(op.inner_dim())].local / 128;
    if (nb <= 1) return;  // one block per row: both orders are the same
    launch(l, role, {TransposeKernel{4}});
    block_scales_ += round_up(rows * nb * 4, 256);
  }

  // A 128x128 operand's scales copied with rows padded to a multiple of 4
  // blocks, where its packed rows are not what cuBLASLt reads.
  bool block_scale_padding(const Tensor& op) {
    if (op.scaling != Scaling::block_128x128) return false;
    const std::uint64_t rows = op.dims[static_cast<std::size_t>(op.outer_dim())].local;
    const std::uint64_t nb = op.dims[static_cast<std::size_t>(op.inner_dim())].local / 128;
    if (nb % 4 == 0 || rows <= 128) return false;
    block_scales_ += round_up((rows + 127) / 128 * round_up(nb, 4) * 4, 256);
    return true;
  }

  // Why cuBLASLt cannot run a GEMM of FP8 operands as an FP8 GEMM (it would
  // dequantize them, or its runner refuses the form), or "" when it can:
  // block_gemm_problem for block scales, and for per-tensor ones the type
  // rules of runtime/gemm/cublaslt_requirements.hpp that a plan can break
  // (ExecutorLogic.EveryAutoGemmIsOneItsBackendTakes holds the two together).
  std::string cublaslt_fp8_problem(const GemmStep& g) const {
    const Tensor& a = t(g.a);
    const Tensor& b = t(g.b);
    if (a.block_scaled() || b.block_scaled()) return block_gemm_problem(g);
    if (a.type == ElemType::e5m2 && b.type == ElemType::e5m2) return "has no e5m2 x e5m2 GEMM";
    const OutputEpilogue& e = g.epilogue;
    // What cuBLASLt writes: the pre-activation where a kernel applies the
    // activation after it (relu, silu), else the output.
    const bool after = e.activation == Activation::relu || e.activation == Activation::silu;
    ElemType d = t(after && e.pre_activation != kNoTensor ? e.pre_activation : g.out).type;
    if (handed_gradient(g)) d = handed_staging_type(g);  // the quantize kernel makes dz after it
    if (d == ElemType::e5m2 && a.type != ElemType::e5m2 && b.type != ElemType::e5m2)
      return "writes e5m2 only from an e5m2 operand";
    if (e.bias != kNoTensor) {
      const ElemType bias = t(e.bias).type;
      const bool ok = is_fp8(d)                ? (bias == ElemType::bf16 || bias == ElemType::fp16)
                      : bias == ElemType::bf16 ? (d == ElemType::bf16 || d == ElemType::fp32)
                                               : (bias == ElemType::fp16 && d == ElemType::fp16);
      if (!ok)
        return "takes no " + std::string(to_string(bias)) + " bias with FP8 operands and a " +
               std::string(to_string(d)) + " output";
    }
    return "";
  }

  void gemm(LoweredStep& l, const GemmStep& g) {
    const std::string role(to_string(g.role));
    if (layer_.gemm == GemmBackend::generated && !g.high_precision) {
      if (!options_.generated_gemm) {
        unsupported("gemm = generated: " + options_.no_generated_gemm);
      } else if (const std::string why = generated_gemm_problem(g); why.empty()) {
        return generated_gemm(l, g);
      } else {
        note_once(role + ": on cuBLASLt, not the generated GEMM: " + why);
      }
    }
    // gemm = auto: cuBLASLt wherever it runs the GEMM in FP8, as it was the
    // faster of the two on every shape measured (H200, the generated GEMM
    // at 0.89-1.07x of it per-tensor, 0.72-0.76x block-scaled:
    // bench/results/gemm_h200_2026-12-03_00ae176.json); the generated GEMM
    // where cuBLASLt would dequantize the operands or cannot run the form.
    // Except MXFP8: the generated GEMM's promotion per 32 K runs at about
    // 255-260 TFLOP/s, and mxfp8_proj's layer steps on it at 245-248 against
    // 605-623 on the dequantize path (H200, d4622c4:
    // bench/results/gemm_mx_h200_2026-12-06_d4622c4.json), so auto keeps
    // dequantizing until it is faster; gemm = generated runs it.
    // Where both run it in FP8, a table of measurements decides instead of
    // the rule, when there is one.
    if (layer_.gemm == GemmBackend::automatic && !g.high_precision && options_.generated_gemm &&
        generated_gemm_problem(g).empty()) {
      const std::string why = cublaslt_fp8_problem(g);
      if (why.empty()) {
        if (table_prefers_generated(role, g)) return generated_gemm(l, g);
      } else if (t(g.a).scaling == Scaling::mx_1x32) {
        note_once(role +
                  ": MXFP8 dequantized for cuBLASLt (gemm = auto): the generated GEMM's "
                  "MXFP8 mode measured slower than that; gemm = generated runs it");
      } else {
        note_once(role + ": the generated GEMM (gemm = auto), as cuBLASLt " +
                  (t(g.a).block_scaled() ? "would dequantize: " + why : why));
        return generated_gemm(l, g);
      }
    }
    cublaslt_gemm(l, g);
  }

  // gemm = auto with a table of measured times (gemm_table.hpp): whether
  // the generated GEMM was the faster at the nearest measured shape of this
  // GEMM's form (one call's M, N and K: a K of rank segments is one call a
  // segment). Notes say which measurement decided, or why none did.
  bool table_prefers_generated(const std::string& role, const GemmStep& g) {
    if (!options_.gemm_table) {
      if (!options_.gemm_table_note.empty()) note_once(options_.gemm_table_note);
      return false;
    }
    const GemmTable& table = *options_.gemm_table;
    const Tensor& a = t(g.a);
    const Tensor& b = t(g.b);
    std::optional<GemmForm> form;
    if (!a.block_scaled() && !b.block_scaled())
      form = GemmForm::per_tensor;
    else if (a.scaling == Scaling::block_1x128 && b.scaling == Scaling::block_128x128)
      form = GemmForm::block_1x128_128x128;
    else if (a.scaling == Scaling::block_1x128 && b.scaling == Scaling::block_1x128)
      form = GemmForm::block_1x128_1x128;
    if (!form) return false;  // a form no table measures: the rule stands
    const auto dim = [](const Tensor& op, int d) {
      return op.dims[static_cast<std::size_t>(d)].local;
    };
    const bool segmented = (a.segmented || b.segmented) && g.segmented_k;
    const std::uint64_t m = dim(a, a.outer_dim()), n = dim(b, b.outer_dim());
    const std::uint64_t k = dim(a, a.inner_dim()) / (segmented ? plan_.ranks : 1);
    const auto shape = [](std::uint64_t x, std::uint64_t y, std::uint64_t z) {
      return std::to_string(x) + "x" + std::to_string(y) + "x" + std::to_string(z);
    };
    const GemmTableEntry* e = table.nearest(*form, m, n, k);
    if (!e) {
      note_once(role + ": on cuBLASLt (gemm = auto): " + table.source + " measured no " +
                std::string(to_string(*form)) + " GEMM within 2x of " + shape(m, n, k) +
                " in every dim");
      return false;
    }
    const bool generated = e->generated_ms < e->cublaslt_ms;
    char times[96];
    std::snprintf(times, sizeof times, "%.3f ms against %.3f", e->generated_ms, e->cublaslt_ms);
    note_once(role + ": " + (generated ? "the generated GEMM" : "cuBLASLt") +
              " (gemm = auto), the faster at " + std::string(to_string(*form)) + " " +
              shape(e->m, e->n, e->k) + " in " + table.source + " (generated " + times +
              " on cuBLASLt)");
    return generated;
  }

  void cublaslt_gemm(LoweredStep& l, const GemmStep& g) {
    GemmCall c;
    c.role = g.role;
    const Tensor& a = t(g.a);
    const Tensor& b = t(g.b);
    const std::string operands = std::string(to_string(g.role)) + ": " +
                                 std::string(to_string(a.scaling)) + " x " +
                                 std::string(to_string(b.scaling)) + " operands";
    bool block_fp8 = false;
    if (g.high_precision) {
      c.operands = GemmCall::Operands::high_precision;
      if (layer_.gemm == GemmBackend::generated)
        note_once(std::string(to_string(g.role)) +
                  ": high-precision operands on cuBLASLt (the generated GEMM is FP8 only)");
    } else if (a.block_scaled() || b.block_scaled()) {
      if (const std::string why = block_gemm_problem(g); why.empty()) {
        block_fp8 = true;
        block_scales_ = 0;
        block_scale_layout(l, LaunchRole::scale_layout_a, a);
        block_scale_layout(l, LaunchRole::scale_layout_b, b);
        const bool relaid = block_scales_ > 0;
        c.pad_scales_a = block_scale_padding(a);
        c.pad_scales_b = block_scale_padding(b);
        out_.staging.block_scales = std::max(out_.staging.block_scales, block_scales_);
        note_once(operands + " in " + c.backend + "'s block-scaled FP8 GEMM" +
                  (relaid ? " (1x128 scales re-laid out K-block-major first)" : ""));
        if (c.pad_scales_a || c.pad_scales_b)
          note_once(std::string(to_string(g.role)) +
                    ": 128x128 scales copied with rows padded to 4 blocks (cuBLASLt's layout)");
      } else {
        c.operands = GemmCall::Operands::dequantized;
        launch(l, LaunchRole::dequantize_a, {operand_dequantize(a)});
        launch(l, LaunchRole::dequantize_b, {operand_dequantize(b)});
        const std::uint64_t bytes = element_bytes(layer_.dtype);
        out_.staging.dequantized =
            std::max(out_.staging.dequantized,
                     round_up(a.elements() * bytes, 256) + round_up(b.elements() * bytes, 256));
        note_once(operands + " dequantized to " + std::string(to_string(layer_.dtype)) + " for a " +
                  c.backend + " GEMM: " + why);
      }
    }
    const OutputEpilogue& e = g.epilogue;
    c.bias = e.bias != kNoTensor;
    c.fp8_output = e.out_scale != kNoTensor;
    if (handed_gradient(g)) {
      // The producer's dz: the GEMM writes high precision (the type of the
      // z it is multiplied with), the quantize kernel the producer would
      // have run makes dz from it (dact, amax, dbias, both usages).
      c.fp8_output = false;
      QuantizeKernel k;
      k.input = handed_staging_type(g);
      k.dact = e.dact;
      k.format = t(g.out).type;
      k.rowwise = true;
      k.columnwise = e.out_columnwise != kNoTensor;
      k.amax = true;
      k.dbias = e.dbias != kNoTensor;
      launch(l, LaunchRole::gradient_after_gemm, {k});
      if (e.dbias != kNoTensor) dbias_reduce(l, e.dbias);
      out_.staging.gemm_output =
          std::max(out_.staging.gemm_output, t(g.out).elements() * element_bytes(k.input));
      note_once(handed_gradient_note(g) + " by the quantize kernel after the " + c.backend +
                " GEMM, which cannot fuse it");
      place(l, g, c);
      return;
    }
    // cuBLASLt's block-scaled GEMM takes a bias epilogue only.
    const bool gelu_after = block_fp8 && e.activation == Activation::gelu;
    if (e.activation == Activation::relu || e.activation == Activation::silu || gelu_after) {
      c.activation_after = true;
      EpilogueKernel k;
      k.activation = e.activation;
      k.input = t(e.pre_activation).type;
      k.output = t(g.out).type;
      k.amax = e.out_amax != kNoTensor;
      launch(l, LaunchRole::activation_after_gemm, {k});
      note_once(std::string(to_string(e.activation)) + " is not a " + c.backend + " epilogue" +
                (gelu_after ? " of block-scaled GEMMs" : "") +
                ": the GEMM writes the pre-activation, a kernel applies it");
    } else {
      c.activation = e.activation;
    }
    if (e.out_columnwise != kNoTensor) {
      launch(l, LaunchRole::transpose_output, {TransposeKernel{}});
      note_once(std::string(to_string(g.role)) + ": " + t(e.out_columnwise).name +
                " (the consumer's columnwise input) transposed after the " + c.backend +
                " GEMM, which cannot write it");
    }
    place(l, g, c);
  }

  // `gemm = generated`, FP8 operands the generated GEMM takes: every
  // epilogue fused, block scales read as quantized.
  void generated_gemm(LoweredStep& l, const GemmStep& g) {
    GemmCall c;
    c.backend = "generated";
    c.role = g.role;
    const Tensor& a = t(g.a);
    const Tensor& b = t(g.b);
    // 1x128 scales K-block-major: rank segments are read one K range at a
    // time, which that order gives as a contiguous range (as for cuBLASLt);
    // and the kernel copies a K block's scales of 4 rows in one 16-byte
    // copy where rows are a multiple of 4 (fp8_gemm_sm90.cuh), for the cost
    // of a transpose of M x K/128 floats (0.2% of the GEMM's bytes).
    // MXFP8 codes K-block-major too (a byte transpose of M x K/32 codes,
    // 1/32 of the operand's bytes): the kernel's K-block-major form ran at
    // 302-306 TFLOP/s against 262-268 row-major (H100, d69a377;
    // docs/gemm.md), except in a GEMM read one K segment at a time (its
    // codes stay row-major: the byte transpose takes no batch of segments).
    const bool segmented = (a.segmented || b.segmented) && g.segmented_k;
    const auto k_major = [&](const Tensor& op) {
      if (op.scaling == Scaling::mx_1x32) return !segmented;
      const auto dim = [&](int d) { return op.dims[static_cast<std::size_t>(d)].local; };
      return segmented || (dim(op.outer_dim()) % 4 == 0 && dim(op.inner_dim()) % 128 == 0);
    };
    block_scales_ = 0;
    if (k_major(a)) block_scale_layout(l, LaunchRole::scale_layout_a, a);
    if (k_major(b)) block_scale_layout(l, LaunchRole::scale_layout_b, b);
    out_.staging.block_scales = std::max(out_.staging.block_scales, block_scales_);
    const OutputEpilogue& e = g.epilogue;
    c.bias = e.bias != kNoTensor;
    c.fp8_output = e.out_scale != kNoTensor;
    c.activation = e.activation;
    c.columnwise_output = e.out_columnwise != kNoTensor;
    c.dact = e.dact;
    c.dbias = e.dbias != kNoTensor;
    if (handed_gradient(g))
      note_once(handed_gradient_note(g) + " in the generated GEMM's epilogue");
    if (c.columnwise_output)
      note_once(std::string(to_string(g.role)) + ": " + t(e.out_columnwise).name +
                (handed_gradient(g) ? " (the producer's columnwise dz)"
                                    : " (the consumer's columnwise input)") +
                " written by the generated GEMM beside " + t(g.out).name);
    note_once(std::string(to_string(g.role)) + ": " + std::string(to_string(a.scaling)) + " x " +
              std::string(to_string(b.scaling)) +
              " operands in the generated GEMM, its epilogue fused");
    place(l, g, c);
  }

  // A dgrad that writes its producer's FP8 dz (chain_hands_dz).
  bool handed_gradient(const GemmStep& g) const {
    return g.role == GemmRole::dgrad && t(g.out).is_fp8();
  }
  // "dgrad: l.dx.fp8.row (the producer's dz, its dact and dbias)", for notes.
  std::string handed_gradient_note(const GemmStep& g) const {
    const OutputEpilogue& e = g.epilogue;
    return std::string(to_string(g.role)) + ": " + t(g.out).name + " (the producer's dz" +
           (e.dact != Activation::none ? ", its dact" : "") +
           (e.dbias != kNoTensor ? " and dbias" : "") + ")";
  }
  // What cuBLASLt writes for such a dgrad: the high-precision type of the z
  // its act' reads (the producer's), which the quantize kernel reads with it.
  ElemType handed_staging_type(const GemmStep& g) const {
    const OutputEpilogue& e = g.epilogue;
    return e.dact_input != kNoTensor ? t(e.dact_input).type
           : e.dbias != kNoTensor    ? t(e.dbias).type
                                     : layer_.dtype;
  }

  // Segments, and the GEMM's place among the step's launches.
  void place(LoweredStep& l, const GemmStep& g, GemmCall c) {
    const Tensor& a = t(g.a);
    const Tensor& b = t(g.b);
    const OutputEpilogue& e = g.epilogue;
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
      const bool finishes =
          k && (k->role == LaunchRole::activation_after_gemm ||
                k->role == LaunchRole::transpose_output ||
                k->role == LaunchRole::gradient_after_gemm || k->role == LaunchRole::dbias_reduce);
      (finishes ? after : before).push_back(action);
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

  // The amaxes `nan = error` decides on: every quantize's and amax pass's,
  // and an FP8 input's as its producer's epilogue wrote it (the producer's
  // own verdict names a NaN it made, but this layer's history would take the
  // NaN amax all the same).
  void nan_verdict() {
    if (layer_.recipe.nan != NanPolicy::error) return;
    NanVerdict v;
    if (plan_.io.x_fp8 != kNoTensor && plan_.io.x_amax != kNoTensor)
      v.watched.push_back({plan_.io.x_amax, plan_.io.x_fp8});
    // In the order the amaxes are made, so that the first NaN named is the
    // one made first: a NaN from forward also reaches the dz its consumer's
    // dgrad epilogue hands over (before this layer's backward).
    for (const auto* pass : {&plan_.forward, &plan_.backward}) {
      if (pass == &plan_.backward && plan_.io.dy_amax != kNoTensor)
        v.watched.push_back({plan_.io.dy_amax, plan_.io.dy});
      for (const Step& s : *pass) {
        if (const auto* q = s.as<QuantizeStep>(); q && q->amax != kNoTensor)
          v.watched.push_back({q->amax, q->src});
        if (const auto* a = s.as<AmaxStep>(); a && a->amax != kNoTensor)
          v.watched.push_back({a->amax, a->src});
      }
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
  const LowerOptions options_;
  LoweredLayer out_;
  std::uint64_t block_scales_ = 0;  // the current GEMM's re-laid-out scales
};

}  // namespace

const std::vector<LoweredStep>& LoweredLayer::pass(std::string_view name) const {
  return name == "forward" ? forward : name == "backward" ? backward : update;
}

LowerOptions lower_options_for(const Target& target) {
  LowerOptions o;
  if (!(target.sm == 90 && target.arch_specific)) {
    o.generated_gemm = false;
    o.no_generated_gemm = "the generated GEMM is built for sm_90a; the target is " + target.str();
  }
  if (target.sm != 90) {
    o.block_scaled_gemm = false;
    o.no_block_scaled_gemm =
        "cuBLASLt's 1x128 / 128x128 block-scaled GEMM is a Hopper (sm_90) "
        "feature; the target is " +
        target.str();
  }
  return o;
}

LoweredLayer lower_layer(const Layer& layer, const LayerPlan& plan, const LowerOptions& options) {
  return Lowering(layer, plan, options).run();
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
  return lower_plan(spec, plan, lower_options_for(spec.target));
}

LoweredPlan lower_plan(const Spec& spec, const Plan& plan, const LowerOptions& options) {
  LoweredPlan out;
  for (const LayerPlan& lp : plan.layers) {
    const Layer* layer = spec.find_layer(lp.layer);
    if (!layer) continue;
    LoweredLayer l = lower_layer(*layer, lp, options);
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
    case LaunchRole::scale_layout_a:
      return "scale_layout_a";
    case LaunchRole::scale_layout_b:
      return "scale_layout_b";
    case LaunchRole::activation_after_gemm:
      return "activation_after_gemm";
    case LaunchRole::gradient_after_gemm:
      return "gradient_after_gemm";
    case LaunchRole::transpose_output:
      return "transpose_output";
    case LaunchRole::ring_sum:
      return "ring_sum";
  }
  return "?";
}

}  // namespace fp8c
