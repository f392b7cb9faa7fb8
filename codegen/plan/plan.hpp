// The Plan: what one training step of each layer does, concretely, for one
// tensor-parallel size and one token count. Every tensor carries its logical
// shape, its physical order (usage), its sharding and, after a gather, how
// the rank segments lie in memory; every collective names the logical dim it
// works on. Each step is a type of its own with named operands (a GEMM knows
// its A, B, output, bias, saved pre-activation...), so no consumer of a plan
// ever recovers a tensor's role from its name: names are for people.
// The planner builds it, the checker validates it, `fp8c plan` prints it and
// the executors run it. Pure data: no CUDA, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "fp8c/elem_type.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

// How a tensor sits in memory. rowwise: logical order (dim 0 outermost);
// columnwise: transposed (dim 1 outermost). High-precision tensors are
// rowwise. Hopper FP8 GEMMs are TN: each operand's K dim must be innermost.
enum class Usage { rowwise, columnwise };

enum class Scaling {
  none,           // high precision, or a scale tensor itself
  per_tensor,     // one fp32 scale (delayed, current)
  block_1x128,    // blockwise activations and gradients: 128 along the inner physical dim
  block_128x128,  // blockwise weights
  mx_1x32,        // MXFP8: 32 along the inner physical dim, E8M0 scales
};

// The logical value a tensor holds (x, w, dz, ...), whatever its form.
enum class Quantity { x, w, b, dy, dz, y, z, dx, dw, db };

// The form in which a tensor holds its quantity.
enum class Form {
  value,         // high precision: the quantity itself
  partial,       // this rank's partial sum, before a sum over the group
  fp8,           // FP8 data (its scales: Tensor::scale)
  block_scales,  // per-block scale_inv (fp32) or E8M0 codes of an FP8 tensor
  scale,         // a per-tensor scale (executors keep its inverse beside it)
  amax,          // max |value| over what this rank holds
  amax_reduced,  // max over the group
  next_scale,    // the delayed scale the update computes for the next step
};

// One logical dimension: its name (tokens, in, out, ...) and its extents.
// Sharded over the tensor-parallel group iff local < global.
struct Dim {
  std::string name;
  std::uint64_t local = 0;
  std::uint64_t global = 0;
  bool sharded() const { return local < global; }
  bool operator==(const Dim&) const = default;
};

constexpr int kNoTensor = -1;

struct Tensor {
  int id = kNoTensor;
  std::string name;  // fc1.x, fc1.x.fp8.col, fc1.dy.fp8.col.gathered, ... (printing only)
  Quantity quantity = Quantity::x;
  Form form = Form::value;
  ElemType type = ElemType::bf16;
  std::array<Dim, 2> dims;
  Usage usage = Usage::rowwise;
  Scaling scaling = Scaling::none;
  int scale = kNoTensor;  // this FP8 tensor's scale tensor (per-tensor or block scales)
  // Set on an all-gather output that was not permuted: the logical dim whose
  // rank segments are stored outermost (memory is [ranks][physical local]).
  std::optional<int> segmented;
  // Block-scaled data whose blocks restart at each of `n` equal parts of a
  // logical dim, instead of running over the whole dim: a gathered tensor
  // (each rank quantized its own part), or a one-rank plan made on the block
  // grid of an N-rank one (PlanOptions::block_grid). 1: no restart.
  std::array<std::uint32_t, 2> block_segments{1, 1};
  // Provided from outside the pass: user input, weights, saved state, the
  // producer layer's output.
  bool external = false;
  std::string note;  // where an external tensor comes from

  // Logical dim stored outermost / innermost.
  int outer_dim() const { return usage == Usage::rowwise ? 0 : 1; }
  int inner_dim() const { return 1 - outer_dim(); }
  std::uint64_t elements() const { return dims[0].local * dims[1].local; }
  std::uint64_t bytes() const;  // per rank
  bool is_fp8() const { return fp8c::is_fp8(type); }
  bool block_scaled() const {
    return is_fp8() && scaling != Scaling::per_tensor && scaling != Scaling::none;
  }
  bool sharded() const { return dims[0].sharded() || dims[1].sharded(); }
};

// --- steps ------------------------------------------------------------------
// Operands are tensor ids; kNoTensor where a step does without one.

// Local amax of a high-precision tensor (current scaling), of src * act'(pre)
// when the step fuses dact.
struct AmaxStep {
  int src = kNoTensor;
  int pre_activation = kNoTensor;
  Activation dact = Activation::none;
  int amax = kNoTensor;
};

// MAX over the tensor-parallel group, so every rank uses the one-rank scale.
struct AmaxAllReduceStep {
  int in = kNoTensor;
  int out = kNoTensor;
  std::uint64_t bytes_per_rank = 0;
};

// High precision -> FP8 usages, with a fused amax, dbias and dact.
struct QuantizeStep {
  int src = kNoTensor;
  int pre_activation = kNoTensor;  // dact: quantizes src * act'(pre_activation)
  Activation dact = Activation::none;
  int scale = kNoTensor;      // delayed: the per-tensor scale to apply
  int amax_in = kNoTensor;    // current: the (group) amax the scale is derived from
  int scale_out = kNoTensor;  // current: the derived scale, shared by both usages
  bool pow2_scale = false;    // scales rounded down to a power of two (current, blockwise)
  int rowwise = kNoTensor;    // FP8 outputs
  int columnwise = kNoTensor;
  int rowwise_scales = kNoTensor;  // their block scales (block and MX formats)
  int columnwise_scales = kNoTensor;
  int amax = kNoTensor;   // delayed: this step's amax, for the scale update
  int dbias = kNoTensor;  // column sums of the (dact'ed) source
  bool stats = false;     // debug statistics (amax, scale, under/overflow)
};

// FP8 rowwise -> columnwise; per-tensor scaling only (the scale is shared).
struct TransposeStep {
  int in = kNoTensor;
  int out = kNoTensor;
};

// Concatenates rank buffers along the physical outermost dim; `dim` is the
// logical dim gathered. Block scales travel with their data.
struct AllGatherStep {
  int dim = 0;
  int in = kNoTensor;
  int out = kNoTensor;
  int scales_in = kNoTensor;
  int scales_out = kNoTensor;
  std::uint64_t bytes_per_rank = 0;
};

// Rank segments -> contiguous along logical dim `dim`.
struct PermuteStep {
  int dim = 0;
  int in = kNoTensor;
  int out = kNoTensor;
  int scales_in = kNoTensor;
  int scales_out = kNoTensor;
};

// High-precision sum over the group, scattered along logical dim `dim`.
struct ReduceScatterStep {
  int dim = 0;
  int in = kNoTensor;
  int out = kNoTensor;
  std::uint64_t bytes_per_rank = 0;
};

// High-precision sum over the group.
struct AllReduceStep {
  int in = kNoTensor;
  int out = kNoTensor;
  std::uint64_t bytes_per_rank = 0;
};

// What a layer's forward output goes through after its last sum: bias,
// activation (saving its input z), and the store, FP8 with a chained
// delayed-scaling consumer's scale plus the output's amax.
// A chained consumer's dgrad uses it to hand its producer FP8 dz instead of
// dx (chain_hands_dz in planner.cpp): dact with the producer's saved
// pre-activation, the producer's dbias (column sums of dz), and the FP8
// store with the producer's gradient scale, its amax and columnwise copy.
struct OutputEpilogue {
  int bias = kNoTensor;
  Activation activation = Activation::none;
  int pre_activation = kNoTensor;  // z out, saved for dact
  int out_scale = kNoTensor;       // the consumer's input scale (FP8 output)
  int out_amax = kNoTensor;
  // The FP8 output's columnwise copy (the same bytes transposed), which a
  // chained consumer's wgrad reads as its X: written beside the output so
  // that the consumer runs no transpose of its own.
  int out_columnwise = kNoTensor;
  // Backward (a dgrad's): out = act'(dact_input) * the GEMM's result, and
  // dbias its column sums (before the FP8 store's scaling).
  Activation dact = Activation::none;
  int dact_input = kNoTensor;  // the producer's z, read
  int dbias = kNoTensor;       // the producer's bias gradient, written
  bool any() const {
    return bias != kNoTensor || activation != Activation::none || out_scale != kNoTensor ||
           dact != Activation::none || dbias != kNoTensor;
  }
};

enum class GemmRole { fprop, dgrad, wgrad };

// out = a . b over K (fprop K = in, dgrad K = out, wgrad K = tokens).
struct GemmStep {
  GemmRole role = GemmRole::fprop;
  int a = kNoTensor;
  int b = kNoTensor;
  int out = kNoTensor;
  bool high_precision = false;  // recipe none, or a debug fallback
  bool segmented_k = false;     // reads a segmented operand rank segment by segment
  bool accumulate = false;
  OutputEpilogue epilogue;  // fprop; a chained consumer's dgrad (the producer's dz)
};

// A row layer's forward output epilogue, after its reduction.
struct EpilogueStep {
  int in = kNoTensor;
  int out = kNoTensor;
  OutputEpilogue epilogue;
};

// Backward in high precision: dz = dy * act'(z) and/or dbias, where no
// quantize step fuses them (a GEMM reads dz in high precision).
struct GradEpilogueStep {
  int dy = kNoTensor;
  int pre_activation = kNoTensor;
  Activation dact = Activation::none;
  int out = kNoTensor;  // dz (dy itself without an activation), in the layer dtype
  int dbias = kNoTensor;
};

// Delayed recipe: amax history -> next scale, for each entry.
struct ScaleUpdateStep {
  struct Entry {
    int state = 0;  // index into LayerPlan::delayed
    int amax = kNoTensor;
    int next_scale = kNoTensor;
  };
  std::vector<Entry> entries;
};

enum class StepKind {
  amax,
  amax_all_reduce,
  quantize,
  transpose,
  all_gather,
  permute,
  reduce_scatter,
  all_reduce,
  gemm,
  epilogue,
  grad_epilogue,
  scale_update,
};

// The alternatives in StepKind order.
using StepOp = std::variant<AmaxStep, AmaxAllReduceStep, QuantizeStep, TransposeStep, AllGatherStep,
                            PermuteStep, ReduceScatterStep, AllReduceStep, GemmStep, EpilogueStep,
                            GradEpilogueStep, ScaleUpdateStep>;

struct Step {
  StepOp op;
  StepKind kind() const { return static_cast<StepKind>(op.index()); }
  template <typename T>
  const T* as() const {
    return std::get_if<T>(&op);
  }
  template <typename T>
  T* as() {
    return std::get_if<T>(&op);
  }
  // Every tensor read / written, in a fixed order per kind (the checker's
  // and printers' generic view).
  std::vector<int> inputs() const;
  std::vector<int> outputs() const;
  // Makes every read of tensor `from` a read of `to` (plan edits in tests).
  void replace_input(int from, int to);
  std::uint64_t bytes_per_rank() const;  // collectives: received per rank; else 0
  bool is_collective() const;

 private:
  std::vector<int*> refs(bool inputs);
};

// A delayed-scaling tensor's state: its scale (read by quantize steps), its
// amax this step (local, and over the group where sharded) and the scale the
// update computes. State files and executors key it by quantity name.
struct DelayedTensor {
  Quantity quantity = Quantity::x;
  ElemType format = ElemType::e4m3;
  int scale = kNoTensor;
  int amax = kNoTensor;          // as quantized (or, chained, as the producer reported)
  int amax_reduced = kNoTensor;  // the update's input: amax, or its MAX over the group
  int next_scale = kNoTensor;
  std::string key() const;  // "x", "w", "dz", ...
};

// The tensors a layer exchanges with its caller and neighbours.
struct LayerIo {
  int x = kNoTensor;          // high-precision input (kNoTensor when it arrives in FP8)
  int x_fp8 = kNoTensor;      // FP8 input written by the producer's epilogue
  int x_amax = kNoTensor;     // its amax, as the producer computed it
  int x_fp8_col = kNoTensor;  // its columnwise copy, where the producer writes one too
  int w = kNoTensor;
  int b = kNoTensor;
  // The output gradient: high precision, or, where the consumer's dgrad
  // hands it over (chain_hands_dz), the FP8 rowwise dz (dy without an
  // activation) that epilogue wrote with this layer's scale, with:
  int dy = kNoTensor;
  int dy_fp8_col = kNoTensor;  // its columnwise copy
  int dy_amax = kNoTensor;     // its amax (this layer's delayed entry)
  int dy_db = kNoTensor;       // the bias gradient that epilogue summed (copied to db)
  int y = kNoTensor;           // high-precision output (kNoTensor when written in FP8)
  int y_fp8 = kNoTensor;       // FP8 output for the consumer
  int y_scale = kNoTensor;     // the consumer's input scale the epilogue applies
  int y_amax = kNoTensor;
  int y_fp8_col = kNoTensor;  // y_fp8's columnwise copy, the consumer's x_fp8_col
  int z = kNoTensor;          // pre-activation saved for backward
  // The input gradient: high precision, or, handed to a producer
  // (chain_hands_dz), that producer's FP8 rowwise dz, with:
  int dx = kNoTensor;
  int dx_scale = kNoTensor;       // the producer's gradient scale (bound to its state)
  int dx_amax = kNoTensor;        // written: the producer's dy_amax
  int dx_fp8_col = kNoTensor;     // written: the producer's dy_fp8_col
  int dx_dact_input = kNoTensor;  // read: the producer's z
  int dx_db = kNoTensor;          // written: the producer's dy_db
  int dw = kNoTensor;
  int db = kNoTensor;  // final (reduced) bias gradient
};

struct LayerPlan {
  std::string layer;
  std::uint32_t ranks = 1;      // tensor-parallel size this layer runs on
  std::vector<Tensor> tensors;  // index == id
  std::vector<Step> forward, backward, update;
  LayerIo io;
  std::vector<DelayedTensor> delayed;  // delayed recipe only
  std::vector<std::string> notes;      // decisions worth printing

  const Tensor& tensor(int id) const { return tensors.at(static_cast<std::size_t>(id)); }
  const Tensor* find(std::string_view name) const;  // by full name (tests, capture)
  // The step that writes tensor `id` (in any pass), or nullptr.
  const Step* producer(int id) const;
  // The delayed entry whose scale (or next scale) is tensor `id`; -1 if none.
  int delayed_index_of_scale(int id) const;
};

struct Plan {
  std::uint32_t ranks = 1;
  std::uint64_t tokens = 0;
  std::vector<LayerPlan> layers;
  const LayerPlan* find(std::string_view layer) const;
};

std::string_view to_string(Usage);
std::string_view to_string(Scaling);
// Block extent of a scaling along a tensor's inner (K) / outer physical dim:
// 32 or 128 inner, 128 outer for 128x128 blocks, 1 where there are no blocks.
std::uint64_t inner_block(Scaling);
std::uint64_t outer_block(Scaling);
std::string_view to_string(StepKind);
std::string_view to_string(GemmRole);
std::string_view to_string(Quantity);
std::string_view to_string(Form);
bool is_collective(StepKind);
bool is_gradient(Quantity);  // dy, dz, dx, dw, db: quantized in the backward format

// Bytes a ring collective receives per rank for a tensor of `total` bytes.
std::uint64_t all_gather_bytes(std::uint64_t total, std::uint32_t ranks);
std::uint64_t all_reduce_bytes(std::uint64_t total, std::uint32_t ranks);

}  // namespace fp8c
