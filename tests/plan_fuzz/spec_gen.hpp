// A structured random generator of valid .fp8 spec text for the planner
// fuzzer. A GenSpec is what the spec means (each layer's recipe, layout,
// chain, sizes, debug settings, written or left to their defaults) plus how
// it is written (inline or through named recipes, layouts and debug blocks,
// declaration order, one-line layers); render() writes it as text. The same
// seed always gives the same GenSpec and text.
//
// Every GenSpec generate() returns satisfies rule_problems() (the checker's
// rules, including the ones the checker is about to enforce):
// - a layer's split dim (out of a column layer, in of a row layer) divides by
//   tensor_parallel; FP8 per-rank in/out are multiples of 16 (MXFP8: 32);
//   every size is a multiple of 32;
// - sequence_parallel only with tensor_parallel > 1, overlap only with it;
// - chained layers share tensor_parallel and the dtype, column feeds row and
//   row feeds column (row -> column with equal sequence_parallel);
// - recipe none: no save_input = fp8, output = fp8 or fallback;
// - output = fp8 only into a single consumer whose recipe is delayed; that
//   consumer (its input arrives in FP8) has no save_input = original and no
//   fallback including fprop or wgrad;
// - the target runs every recipe (blockwise: sm_90+, mxfp8: sm_100+ to avoid
//   the emulation warning) and gemm = generated only on sm_90a.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp8c/spec.hpp"

namespace fp8c::planfuzz {

// splitmix64: the same stream on every platform and standard library.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }
  // An index drawn with the given weights.
  std::size_t weighted(const std::vector<double>& weights);

 private:
  std::uint64_t state_;
};

struct RecipeSettings {
  std::optional<Fp8Format> forward, backward;
  std::optional<std::uint32_t> history, margin;
  std::optional<AmaxAlgo> amax;
  std::optional<ScaleForm> scale;
  std::optional<NanPolicy> nan;
  bool empty() const;
  bool operator==(const RecipeSettings&) const = default;
};

struct LayoutSettings {
  std::optional<std::uint32_t> tp;
  std::optional<bool> sp;
  std::optional<Overlap> overlap;
  bool empty() const { return !tp && !sp && !overlap; }
  bool operator==(const LayoutSettings&) const = default;
};

struct DebugSettings {
  std::optional<bool> stats;
  std::optional<std::string> fallback;  // "none", "all", or GEMM names ("dgrad wgrad")
  bool empty() const { return !stats && !fallback; }
  bool operator==(const DebugSettings&) const = default;
};

struct NamedRecipe {
  std::string name;
  RecipeKind kind = RecipeKind::none;
  RecipeSettings settings;
};
struct NamedLayout {
  std::string name;
  LayoutSettings settings;
};
struct NamedDebug {
  std::string name;
  DebugSettings settings;
};

struct GenLayer {
  std::string name;
  std::uint64_t in = 0;  // roots only; a consumer's in is its producer's out
  std::uint64_t out = 0;
  int input = -1;        // producer (index into GenSpec::layers)
  bool write_in = true;  // a consumer may leave `in` out
  std::optional<bool> bias;
  std::optional<Activation> activation;
  std::optional<DType> dtype;
  std::string output;  // "" (the dtype), "fp8", or a dtype name
  // recipe: kind and the settings written (inline, or named + refinement)
  RecipeKind kind = RecipeKind::none;
  bool recipe_written = true;  // false only for recipe none
  RecipeSettings recipe;
  int recipe_ref = -1;  // a named recipe whose settings are a subset of `recipe`
  // layout: settings written (inline or named + refinement) and the mode
  bool layout_written = false;
  LayoutSettings layout;
  int layout_ref = -1;
  std::optional<ParallelMode> mode;  // not written: column (one rank only)
  std::string save_input;            // "", "fp8", "original"
  // debug: 0 not written, 1 `off`, 2 settings (inline or named + refinement)
  int debug_form = 0;
  DebugSettings debug;
  int debug_ref = -1;
  std::string gemm;  // "", "cublaslt", "generated"
  bool one_line = false;
};

struct GenSpec {
  std::uint64_t seed = 0;
  std::string target;  // "" (default sm_90a) or e.g. "sm_100a"
  std::vector<NamedRecipe> recipes;
  std::vector<NamedLayout> layouts;
  std::vector<NamedDebug> debugs;
  std::vector<GenLayer> layers;
  std::uint64_t order_seed = 0;  // declaration order and key order in render()
  bool canonical = false;        // render() keeps file and key order (shrunk repros)
  std::string twist;             // set by apply_twist(): the rule this spec breaks on purpose
};

// What a GenLayer means (defaults applied).
std::uint64_t layer_in(const GenSpec& g, std::size_t i);
std::uint32_t layer_tp(const GenSpec& g, const GenLayer& l);
bool layer_sp(const GenSpec& g, const GenLayer& l);
Overlap layer_overlap(const GenSpec& g, const GenLayer& l);
ParallelMode layer_mode(const GenLayer& l);
DType layer_dtype(const GenLayer& l);
bool fp8_input(const GenSpec& g, const GenLayer& l);  // its producer hands it FP8
std::string layer_fallback(const GenSpec& g, const GenLayer& l);

// Every rule of the header comment this GenSpec breaks (empty: valid).
std::vector<std::string> rule_problems(const GenSpec& g);

GenSpec generate(std::uint64_t seed);
// Draws again from `rng` (the generator's stream after a rejected GenSpec).
GenSpec generate(Rng& rng, std::uint64_t seed);

std::string render(const GenSpec& g);

// Lenient mode (opt-in): bends one rule so that the spec still checks today
// but draws a warning, or breaks a rule the checker is about to enforce:
// FP8 output into a non-delayed consumer or into nothing, into two delayed
// consumers, or into a consumer with another dtype, save_input = original or
// an fprop/wgrad fallback on a layer with FP8 input, sequence_parallel on one
// rank, overlap without it, a fallback on recipe none, mxfp8 before sm_100.
// Returns the twist's name ("" when none applies; GenSpec::twist is set too).
std::string apply_twist(Rng& rng, GenSpec& g);

// A one-line description: "delayed column tp4 sp -> current row tp4 sp".
std::string describe(const GenSpec& g);

}  // namespace fp8c::planfuzz
