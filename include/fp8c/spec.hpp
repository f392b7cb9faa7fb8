// The checked, typed form of a .fp8 file: every reference resolved, every
// default filled in. Everything downstream (planner, kernel generators,
// runtime) reads a Spec, never the AST.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8c/elem_type.hpp"

namespace fp8c {

// Element types are the one ElemType (elem_type.hpp); these names say which
// of its values a field takes, and keep `DType::bf16`, `Fp8Format::e4m3`
// spelled as before.
// The two FP8 encodings of Hopper tensor cores: e4m3 or e5m2.
using Fp8Format = ElemType;

// High-precision element types a layer may take in and hand out: bf16, fp16
// or fp32.
using DType = ElemType;

enum class RecipeKind {
  none,       // high precision: the reference path
  delayed,    // per-tensor scale from an amax history
  current,    // per-tensor scale from this tensor's own amax
  blockwise,  // 1x128 activations and gradients, 128x128 weights
  mxfp8,      // 1x32 blocks with E8M0 scales
};

enum class AmaxAlgo { max, most_recent };

// How a scale is stored: any fp32 value, or rounded down to a power of two
// (exact to apply, the choice of DeepSeek-style block recipes).
enum class ScaleForm { fp32, pow2 };

// What a quantizer does with NaN in its input: carry it into the FP8 data
// (E4M3 and E5M2 both encode NaN), or fail the step and leave state unchanged.
enum class NanPolicy { propagate, error };

// A recipe's settings. The member defaults are those of delayed and current
// scaling; default_recipe(kind) gives each kind's own (what the checker starts
// a recipe of that kind from).
struct Recipe {
  std::string name;  // empty for an inline recipe
  RecipeKind kind = RecipeKind::none;
  Fp8Format forward = Fp8Format::e4m3;   // activations and weights
  Fp8Format backward = Fp8Format::e5m2;  // gradients
  // delayed only
  std::uint32_t history = 1024;
  AmaxAlgo amax = AmaxAlgo::max;
  std::uint32_t margin = 0;
  // current and blockwise (mxfp8 scales are always E8M0, delayed always fp32)
  ScaleForm scale = ScaleForm::fp32;
  NanPolicy nan = NanPolicy::propagate;

  bool is_fp8() const { return kind != RecipeKind::none; }
  bool operator==(const Recipe&) const = default;
};

// A recipe of `kind` with that kind's defaults, as TransformerEngine's recipes
// have them: delayed and current are HYBRID (forward e4m3, backward e5m2, fp32
// scales); blockwise is Float8BlockScaling (e4m3 throughout, power-of-two
// scales); mxfp8 is MXFP8BlockScaling (e4m3 throughout, E8M0 scales).
Recipe default_recipe(RecipeKind kind);

enum class Overlap { none, bulk, ring };

struct Layout {
  std::string name;  // empty for an inline layout
  std::uint32_t tensor_parallel = 1;
  bool sequence_parallel = false;
  Overlap overlap = Overlap::none;
  bool operator==(const Layout&) const = default;
};

// How a linear layer's weight is split over the tensor-parallel group:
// column splits `out` (no forward reduction), row splits `in` (forward
// output is summed over the group).
enum class ParallelMode { column, row };

enum class Activation { none, relu, gelu, silu };

// What the forward pass keeps for backward: the quantized input (its
// columnwise usage) or the original high-precision input, re-quantized in
// backward into exactly the usage wgrad needs.
enum class SaveInput { fp8, original };

// `gemm = auto` (the default): per GEMM, cuBLASLt where it runs the GEMM in
// FP8, the generated GEMM where cuBLASLt would dequantize or cannot run it
// (codegen/lower/lowered.hpp says which and why).
enum class GemmBackend { automatic, cublaslt, generated };
// Who turns the generated kernels into machine code (`backend =`, a
// top-level setting): NVRTC from their CUDA C++, or fp8c's LLVM backend
// from their kernel IR (codegen/ir) through LLVM's NVPTX target. Kinds
// that are not built as IR yet are compiled by NVRTC under either.
enum class KernelBackend { nvrtc, llvm };

// The three GEMMs of a linear layer, for per-GEMM high-precision fallback.
enum class GemmKind { fprop, dgrad, wgrad };

struct Debug {
  std::string name;                // empty for an inline debug block
  bool stats = false;              // per-tensor amax, scale, under/overflow counts
  std::vector<GemmKind> fallback;  // GEMMs run in high precision, sorted, unique
  bool enabled() const { return stats || !fallback.empty(); }
  bool operator==(const Debug&) const = default;
};

struct Layer {
  std::string name;
  std::uint64_t in = 0;
  std::uint64_t out = 0;
  bool bias = false;
  Activation activation = Activation::none;
  DType dtype = DType::bf16;
  // output = fp8 asks for FP8 output, honoured only as fp8_output_consumer()
  // says; otherwise (and always for output = DTYPE) the output is written in
  // output_dtype, which is `dtype` unless `output = DTYPE` says otherwise.
  bool output_fp8 = false;
  DType output_dtype = DType::bf16;
  Recipe recipe;  // resolved copy; recipe.name says where it came from
  Layout layout;  // resolved copy
  ParallelMode mode = ParallelMode::column;
  SaveInput save_input = SaveInput::fp8;
  std::string input;  // producer layer, empty when fed by the user
  GemmBackend gemm = GemmBackend::automatic;
  // The FP8 copies of the weight are kept across micro-batches: the
  // weight's casts are skipped while the caller's weight version is
  // unchanged (LayerInputs::w_version; TransformerEngine's
  // is_first_microbatch). Also turned on for every layer by
  // SessionOptions::weight_cache.
  bool weight_cache = false;
  Debug debug;

  // Per-rank weight shape under the layout.
  std::uint64_t in_per_rank() const {
    return mode == ParallelMode::row ? in / layout.tensor_parallel : in;
  }
  std::uint64_t out_per_rank() const {
    return mode == ParallelMode::column ? out / layout.tensor_parallel : out;
  }
  bool operator==(const Layer&) const = default;
};

// A GPU architecture a spec is checked against, e.g. sm_90a.
struct Target {
  std::uint32_t sm = 90;      // compute capability major*10 + minor
  bool arch_specific = true;  // the "a" suffix: wgmma, setmaxnreg
  std::string str() const;
  bool operator==(const Target&) const = default;
};

struct Spec {
  Target target;
  KernelBackend backend = KernelBackend::nvrtc;
  std::vector<Recipe> recipes;  // named recipes, in file order
  std::vector<Layout> layouts;  // named layouts, in file order
  std::vector<Debug> debugs;    // named debug blocks, in file order
  std::vector<Layer> layers;    // in file order; a producer may follow its consumer

  const Layer* find_layer(std::string_view name) const;
  bool operator==(const Spec&) const = default;
};

// Whether `producer`'s `output = fp8` is honoured, the one rule the checker
// and the planner share. It is when the producer has an FP8 recipe and
// exactly one layer consumes it (`input = producer`), and that consumer's
// recipe is delayed: the producer's GEMM epilogue then writes FP8 with the
// consumer's delayed input scale (known before the GEMM runs), and the
// consumer takes that FP8 tensor as its input (it has no high-precision
// input). Returns that consumer, a layer of `spec`; nullptr when the producer
// writes its output in high precision instead (producer.output_dtype, which
// is producer.dtype when output = fp8): no `output = fp8`, no consumer,
// several consumers, or a consumer whose scales come from the data itself
// (current, blockwise, mxfp8) or that has no FP8 input (none).
// A consumer takes FP8 input exactly when
//   fp8_output_consumer(spec, *spec.find_layer(consumer.input)) == &consumer.
const Layer* fp8_output_consumer(const Spec& spec, const Layer& producer);
// Why the producer's `output = fp8` is not honoured ("no layer consumes it
// ...", "consumer 'fc2' uses recipe current, whose input scale ..."), or ""
// when it is, or when the producer did not ask for it. `fp8c check` warns
// with it; the plan notes it.
std::string fp8_output_not_honoured(const Spec& spec, const Layer& producer);

// Names of enum values as written in the language (ElemType's, which are
// also its words, is in elem_type.hpp).
std::string_view to_string(RecipeKind);
std::string_view to_string(AmaxAlgo);
std::string_view to_string(ScaleForm);
std::string_view to_string(NanPolicy);
std::string_view to_string(Overlap);
std::string_view to_string(ParallelMode);
std::string_view to_string(Activation);
std::string_view to_string(SaveInput);
std::string_view to_string(GemmBackend);
std::string_view to_string(KernelBackend);
std::string_view to_string(GemmKind);

// Parses "sm_90a", "sm_89", ...; nullopt when it is not a known target.
std::optional<Target> parse_target(std::string_view);

}  // namespace fp8c
