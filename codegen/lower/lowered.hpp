// The lowering stage: plan + target -> exactly what runs. For each step of
// each pass of a layer, the kernel launches (with the role each plays), the
// GEMM calls (backend, operand form, epilogue, what runs after), and the
// collectives (and on which stream); the staging buffers the fallbacks need;
// and the set of kernels to compile. The GPU executor, Session, `fp8c emit`,
// `fp8c compile`, `fp8c bench` and `fp8c plan --lowered` all read this, so
// what is compiled is what runs. Choices that depend on what the GEMM backend
// can do (a block-scaled GEMM on dequantized operands, a ReLU applied by a
// kernel after the GEMM) are made here, visibly. Pure data: no CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "codegen/kernels/generated_kernel.hpp"
#include "codegen/lower/gemm_table.hpp"
#include "codegen/lower/ring.hpp"
#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

// What a kernel launch does for its step.
enum class LaunchRole {
  amax,                   // an AmaxStep's amax pass
  quantize,               // a QuantizeStep's cast (per-tensor or block kernel)
  dact_to_staging,        // block quantize with dact/dbias: dz in fp32 into staging first
  dbias_reduce,           // the step's dbias tile partials -> its dbias tensor
  transpose,              // a TransposeStep
  permute_data,           // a PermuteStep's data
  permute_scales,         // ... and its block scales
  epilogue,               // an EpilogueStep or a GradEpilogueStep
  scale_update,           // a ScaleUpdateStep, every entry in one launch
  dequantize_a,           // a GEMM's block-scaled operand A into staging (layer dtype)
  dequantize_b,           // ... and B
  scale_layout_a,         // a 1x128 operand A's block scales, row-major -> K-block-major,
  scale_layout_b,         // ... and B's, into staging (what the block-scaled GEMM reads)
  activation_after_gemm,  // relu / silu (any activation after a block-scaled GEMM) on
                          // the pre-activation the GEMM wrote
  transpose_output,       // a chained FP8 output's columnwise copy, after a GEMM that
                          // cannot write it (cuBLASLt): OutputEpilogue::out_columnwise
  ring_sum,               // overlap = ring, scatter_rows: a chunk's partial added to the
                          // running sum that arrived (ring.hpp)
  gradient_after_gemm,    // a dgrad's FP8 dz for its producer (OutputEpilogue::dact, dbias),
                          // after a GEMM that cannot fuse it (cuBLASLt): the quantize
                          // kernel with dact, amax, dbias and both usages, reading the
                          // GEMM's high-precision output from staging
};

struct KernelLaunch {
  LaunchRole role = LaunchRole::quantize;
  GeneratedKernel kernel;
};

// How a GEMM step runs on its backend.
struct GemmCall {
  enum class Operands {
    fp8,             // FP8 operands with their scales, as the plan has them
                     // (block scales of a 1x128 operand re-laid out by
                     // scale_layout_a/b first, where it has more than one K block)
    high_precision,  // the layer dtype, as the plan has them
    dequantized,     // block-scaled operands the backend cannot read: the
                     // dequantize_a/b launches before it write them to staging
  };
  std::string backend = "cublaslt";  // or "generated" (runtime/gemm/generated_gemm.hpp)
  GemmRole role = GemmRole::fprop;
  Operands operands = Operands::fp8;
  // The backend's epilogue: bias, GELU with its pre-activation as aux, FP8
  // output with scale and amax. relu / silu are not cuBLASLt epilogues: the
  // GEMM writes the pre-activation (bias added) and activation_after_gemm
  // makes the output.
  bool bias = false;
  Activation activation = Activation::none;
  bool fp8_output = false;
  bool activation_after = false;
  // The FP8 output's columnwise copy for a chained consumer
  // (OutputEpilogue::out_columnwise): the generated GEMM writes it beside
  // the output (D^T); after cuBLASLt a transpose_output launch makes it.
  bool columnwise_output = false;
  // The backward epilogue of a dgrad handing its producer FP8 dz
  // (OutputEpilogue::dact, dbias): fused in the generated GEMM; cuBLASLt
  // writes high precision to staging and gradient_after_gemm makes dz.
  Activation dact = Activation::none;
  bool dbias = false;
  // A segmented operand is read one rank segment at a time, `segments`
  // accumulating calls (segments > 1).
  std::uint32_t segments = 1;
  // A 128x128-scaled operand whose rows of K blocks are not a multiple of 4
  // long (over more than 128 rows): its scales are copied into staging with
  // each row padded to a multiple of 4 blocks, the layout cuBLASLt reads.
  bool pad_scales_a = false;
  bool pad_scales_b = false;
  // overlap = ring (ring.hpp): the GEMM runs chunk by chunk inside the ring
  // of the collective at step ring_collective, which this step issues.
  RingForm ring = RingForm::none;
  int ring_collective = -1;
};

struct CollectiveCall {
  StepKind kind = StepKind::all_gather;
  bool on_comm_stream = false;  // overlap = bulk / ring: a second stream, ordered by events
  // overlap = ring: the collective is the ring of step ring_gemm's GEMM and
  // runs there, chunk by chunk; this step itself issues nothing.
  int ring_gemm = -1;
};

using LoweredAction = std::variant<KernelLaunch, GemmCall, CollectiveCall>;

struct LoweredStep {
  std::vector<LoweredAction> actions;  // in order
  // The step reads nothing but the weight, what other such steps made of it
  // and the layer's scale state (the weight's casts, transposes and amax;
  // never a collective, which every rank runs either way): what the FP8
  // weight cache skips while the weight is unchanged
  // (SessionOptions::weight_cache, `weight_cache = true`).
  bool weight_only = false;
  // The schedule (codegen/lower/schedule.hpp): the steps of the same pass
  // (indices) it must follow, and whether it runs on the side stream,
  // beside the GEMMs that do not need it.
  std::vector<int> after;
  bool on_side_stream = false;

  // The first action of type A (KernelLaunch, GemmCall, CollectiveCall), or
  // nullptr.
  template <typename A>
  const A* find() const {
    for (const auto& a : actions)
      if (const auto* x = std::get_if<A>(&a)) return x;
    return nullptr;
  }
  // The kernel launch playing `role`, or nullptr.
  const KernelLaunch* find_launch(LaunchRole role) const {
    for (const auto& a : actions)
      if (const auto* k = std::get_if<KernelLaunch>(&a); k && k->role == role) return k;
    return nullptr;
  }
  // overlap = ring: the GEMM step whose ring this collective step is (the
  // step itself then issues nothing), or -1.
  int ring_gemm() const {
    const auto* c = find<CollectiveCall>();
    return c ? c->ring_gemm : -1;
  }
};

// Scratch space a layer's steps share, in bytes (0: none).
struct StagingSizes {
  std::uint64_t dz_fp32 = 0;      // dact_to_staging's output (largest source)
  std::uint64_t dequantized = 0;  // both dequantized operands of the largest such GEMM
  // Both block scale tensors of the largest block-scaled FP8 GEMM, as
  // cuBLASLt reads them (1x128 K-block-major, 128x128 rows padded).
  std::uint64_t block_scales = 0;
  // overlap = ring, scatter_rows: the running sum received and the one
  // sent, fp32, of the largest rank chunk.
  std::uint64_t ring_sums = 0;
  // gradient_after_gemm's input: the largest such GEMM's output.
  std::uint64_t gemm_output = 0;
};

// Under `nan = error`, the verdict each step takes on the device after
// backward, before the update (no host round trip): the watched amaxes are
// copied side by side, agreed over the group by a MAX all-reduce of their
// bits (ranks > 1; NaN bits are the largest of non-negative floats, so a NaN
// anywhere wins whatever the collective does with float NaN), and copied to
// the host, where the next call on the layer (or synchronize) reports a NaN
// by name. The scale update reads the agreed copy and writes nothing when it
// holds a NaN (ScaleUpdateKernel::guard).
struct NanVerdict {
  struct Watched {
    int amax = -1;    // a QuantizeStep's or AmaxStep's amax tensor
    int source = -1;  // the tensor it is the amax of (named in the error)
  };
  std::vector<Watched> watched;  // forward then backward, in step order
  bool all_reduce = false;
};

struct LoweredLayer {
  std::string layer;
  std::uint32_t ranks = 1;
  bool weight_cache =
      false;  // the layer's `weight_cache =` (weight-only steps skipped when cached)
  // One entry per plan step, same order.
  std::vector<LoweredStep> forward, backward, update;
  // The order the executor issues forward's and backward's steps in (a
  // permutation of their indices that keeps every LoweredStep::after).
  std::vector<int> forward_order, backward_order;
  StagingSizes staging;
  std::optional<NanVerdict> nan_verdict;
  // Every kernel the layer launches, each once, in order of first use.
  std::vector<GeneratedKernel> kernels;
  std::vector<std::string> notes;        // fallbacks taken, and why
  std::vector<std::string> unsupported;  // what this target cannot run yet, and why

  const std::vector<LoweredStep>& pass(std::string_view name) const;
};

struct LoweredKernel {
  GeneratedKernel kernel;
  std::vector<std::string> used_by;  // "fc1 forward step 2 (quantize fc1.x)", ...
};

struct LoweredPlan {
  std::vector<LoweredLayer> layers;
  std::vector<LoweredKernel> kernels;  // every layer's, each once
  std::vector<std::string> unsupported;
  const LoweredLayer* find(std::string_view layer) const;
  std::vector<GeneratedKernel> kernel_list() const;
};

// What the target's GEMM backend can do, where the lowering depends on it.
struct LowerOptions {
  // cuBLASLt's block-scaled FP8 GEMM: 1x128 x 128x128 and 1x128 x 1x128 with
  // fp32 scales (Hopper, cuBLASLt 12.9 or newer). Without it, block-scaled
  // operands are dequantized, and the notes give this reason.
  bool block_scaled_gemm = true;
  std::string no_block_scaled_gemm;
  // fp8c's generated GEMM (sm_90a), which layers with `gemm = generated` run
  // their FP8 GEMMs on. Without it such a layer is refused with this reason
  // (and `gemm = auto` keeps every GEMM on cuBLASLt).
  bool generated_gemm = true;
  std::string no_generated_gemm;
  // A second compute stream for work beside the GEMMs (schedule.hpp); off
  // with FP8C_SIDE_STREAM=0 on a GPU (runtime/gemm/gemm.hpp), to measure it.
  bool side_stream = true;
  // Measured times of both GEMM backends (gemm_table.hpp): where set,
  // `gemm = auto` gives a GEMM both run in FP8 to the one measured faster
  // at the nearest shape, instead of keeping cuBLASLt; `gemm_table_note`
  // says why a table was offered and not used (a note of every layer).
  std::shared_ptr<const GemmTable> gemm_table;
  std::string gemm_table_note;
};

// What a spec's target offers: cuBLASLt's block-scaled mode is Hopper's
// (sm_90); on other targets the lowering dequantizes. The GPU executor
// decides from the GPU and library it runs on instead
// (runtime/gemm/gemm.hpp: cublaslt_lower_options).
LowerOptions lower_options_for(const Target& target);

// The GEMM backend the lowering targets is cuBLASLt: per-tensor FP8, bias
// and GELU epilogues, FP8 output with amax; block-scaled FP8 (1x128 /
// 128x128) with a bias where the shapes and the options allow it, operands
// dequantized to the layer dtype otherwise (MXFP8 always: Hopper's cuBLASLt
// has no MX GEMM), each such choice in the notes. A layer with
// `gemm = generated` runs its FP8 GEMMs on fp8c's generated GEMM instead
// (backend "generated"): block scales as quantized, every epilogue fused;
// its high-precision GEMMs, and block-scaled ones the generated GEMM has no
// mode for (MXFP8), stay on cuBLASLt, said in the notes. With `gemm = auto`
// (the default) an FP8 GEMM runs on cuBLASLt where cuBLASLt runs it as an
// FP8 GEMM (the faster of the two wherever both were measured), and on the
// generated GEMM where cuBLASLt would dequantize its operands or cannot run
// its form (e5m2 x e5m2, a bias type it does not pair with the output), a
// note saying which.
LoweredLayer lower_layer(const Layer& layer, const LayerPlan& plan,
                         const LowerOptions& options = {});
LoweredPlan lower_plan(const Spec& spec, const Plan& plan);
LoweredPlan lower_plan(const Spec& spec, const Plan& plan, const LowerOptions& options);

// `fp8c plan --lowered`.
std::string print_lowered(const Plan& plan, const LoweredPlan& lowered);

std::string_view to_string(LaunchRole);

}  // namespace fp8c
