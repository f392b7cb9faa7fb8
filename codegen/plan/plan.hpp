// The Plan: what one training step of each layer does, concretely, for one
// tensor-parallel size and one token count. Every tensor carries its logical
// shape, its physical order (usage), its sharding and, after a gather, how
// the rank segments lie in memory; every collective names the logical dim it
// works on. The planner builds it, the checker validates it, `fp8c plan`
// prints it and the runtime executes it. Pure data: no CUDA, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8c/spec.hpp"

namespace fp8c {

enum class ElemType { bf16, fp16, fp32, e4m3, e5m2, e8m0 };

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

// One logical dimension: its name (tokens, in, out, ...) and its extents.
// Sharded over the tensor-parallel group iff local < global.
struct Dim {
  std::string name;
  std::uint64_t local = 0;
  std::uint64_t global = 0;
  bool sharded() const { return local < global; }
  bool operator==(const Dim&) const = default;
};

struct Tensor {
  int id = -1;
  std::string name;  // fc1.x, fc1.x.fp8.col, fc1.dy.fp8.col.gathered, ...
  ElemType type = ElemType::bf16;
  std::array<Dim, 2> dims;
  Usage usage = Usage::rowwise;
  Scaling scaling = Scaling::none;
  int scale = -1;  // id of this FP8 tensor's scale tensor, -1 for none
  // Set on an all-gather output that was not permuted: the logical dim whose
  // rank segments are stored outermost (memory is [ranks][physical local]).
  std::optional<int> segmented;
  // Provided from outside the pass: user input, weights, saved state, the
  // producer layer's output, or a tensor saved by forward for backward.
  bool external = false;
  std::string note;  // where an external tensor comes from

  // Logical dim stored outermost / innermost.
  int outer_dim() const { return usage == Usage::rowwise ? 0 : 1; }
  int inner_dim() const { return 1 - outer_dim(); }
  std::uint64_t elements() const { return dims[0].local * dims[1].local; }
  std::uint64_t bytes() const;  // per rank
  bool is_fp8() const { return type == ElemType::e4m3 || type == ElemType::e5m2; }
  bool sharded() const { return dims[0].sharded() || dims[1].sharded(); }
};

enum class StepKind {
  amax,             // local amax of a high-precision tensor (current scaling)
  amax_all_reduce,  // MAX over the TP group, so every rank uses the 1-rank scale
  quantize,         // high precision -> FP8 usages (+ fused amax, dbias, dact)
  transpose,        // FP8 rowwise -> columnwise; per-tensor scaling only
  all_gather,       // concatenates rank buffers along the physical outermost dim
  permute,          // rank segments -> contiguous along the gathered dim
  dequantize,       // FP8 -> high precision (debug fallback GEMM operands)
  reduce_scatter,   // high precision sum, scattered along `dim`
  all_reduce,       // high precision sum
  gemm,
  epilogue,      // bias / activation / FP8 cast after a row layer's reduction
  scale_update,  // delayed recipe: amax history -> next scale
};

enum class GemmRole { fprop, dgrad, wgrad };

struct Step {
  StepKind kind = StepKind::gemm;
  std::vector<int> inputs;
  std::vector<int> outputs;
  // collectives: the LOGICAL dim gathered / scattered / reduced
  int dim = -1;
  std::uint64_t bytes_per_rank = 0;  // received per rank, ring algorithm
  // quantize
  bool rowwise = false;
  bool columnwise = false;
  bool fused_amax = false;
  bool fused_dbias = false;
  bool fused_dact = false;
  bool stats = false;  // debug statistics (amax, scale, under/overflow)
  // gemm
  GemmRole role = GemmRole::fprop;
  bool high_precision = false;  // recipe none, or a debug fallback
  bool bias = false;
  Activation activation = Activation::none;  // forward: fused act (saves aux)
  bool dact = false;
  bool segmented_k = false;  // reads a segmented operand rank segment by segment
  bool accumulate = false;
};

struct LayerPlan {
  std::string layer;
  std::uint32_t ranks = 1;      // tensor-parallel size this layer runs on
  std::vector<Tensor> tensors;  // index == id
  std::vector<Step> forward, backward, update;
  std::vector<std::string> notes;  // decisions worth printing

  const Tensor& tensor(int id) const { return tensors.at(static_cast<std::size_t>(id)); }
  const Tensor* find(std::string_view name) const;
};

struct Plan {
  std::uint32_t ranks = 1;
  std::uint64_t tokens = 0;
  std::vector<LayerPlan> layers;
  const LayerPlan* find(std::string_view layer) const;
};

std::string_view to_string(ElemType);
std::string_view to_string(Usage);
std::string_view to_string(Scaling);
std::string_view to_string(StepKind);
std::string_view to_string(GemmRole);
std::size_t element_bytes(ElemType);
bool is_collective(StepKind);

// Bytes a ring collective receives per rank for a tensor of `total` bytes.
std::uint64_t all_gather_bytes(std::uint64_t total, std::uint32_t ranks);
std::uint64_t all_reduce_bytes(std::uint64_t total, std::uint32_t ranks);

}  // namespace fp8c
