#include "tests/plan_fuzz/spec_gen.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace fp8c::planfuzz {

std::uint64_t Rng::next() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::size_t Rng::weighted(const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) total += w;
  double x = static_cast<double>(next() >> 11) * 0x1.0p-53 * total;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (x < weights[i]) return i;
    x -= weights[i];
  }
  return weights.size() - 1;
}

bool RecipeSettings::empty() const {
  return !forward && !backward && !history && !margin && !amax && !scale && !nan;
}

namespace {

std::string s(std::string_view v) {
  return std::string(v);
}

int target_sm(const std::string& target) {
  if (target.empty()) return 90;
  return std::stoi(target.substr(3, 3));
}

bool target_sm90a(const std::string& target) {
  return target.empty() || target == "sm_90a";
}

std::uint64_t fp8_align(RecipeKind k) {
  if (k == RecipeKind::none) return 1;
  return k == RecipeKind::mxfp8 ? 32 : 16;
}

// Settings written in `full` and not in `base` (a named item refined inline).
RecipeSettings minus(const RecipeSettings& full, const RecipeSettings& base) {
  RecipeSettings r = full;
  if (base.forward) r.forward.reset();
  if (base.backward) r.backward.reset();
  if (base.history) r.history.reset();
  if (base.margin) r.margin.reset();
  if (base.amax) r.amax.reset();
  if (base.scale) r.scale.reset();
  if (base.nan) r.nan.reset();
  return r;
}
LayoutSettings minus(const LayoutSettings& full, const LayoutSettings& base) {
  LayoutSettings r = full;
  if (base.tp) r.tp.reset();
  if (base.sp) r.sp.reset();
  if (base.overlap) r.overlap.reset();
  return r;
}
DebugSettings minus(const DebugSettings& full, const DebugSettings& base) {
  DebugSettings r = full;
  if (base.stats) r.stats.reset();
  if (base.fallback) r.fallback.reset();
  return r;
}

template <class T>
bool subset_opt(const std::optional<T>& base, const std::optional<T>& full) {
  return !base || (full && *full == *base);
}
bool subset(const RecipeSettings& b, const RecipeSettings& f) {
  return subset_opt(b.forward, f.forward) && subset_opt(b.backward, f.backward) &&
         subset_opt(b.history, f.history) && subset_opt(b.margin, f.margin) &&
         subset_opt(b.amax, f.amax) && subset_opt(b.scale, f.scale) && subset_opt(b.nan, f.nan);
}
bool subset(const LayoutSettings& b, const LayoutSettings& f) {
  return subset_opt(b.tp, f.tp) && subset_opt(b.sp, f.sp) && subset_opt(b.overlap, f.overlap);
}
bool subset(const DebugSettings& b, const DebugSettings& f) {
  return subset_opt(b.stats, f.stats) && subset_opt(b.fallback, f.fallback);
}

// A random subset of the written settings (each kept with probability p).
RecipeSettings random_subset(Rng& rng, const RecipeSettings& f, double p) {
  RecipeSettings r;
  if (f.forward && rng.chance(p)) r.forward = f.forward;
  if (f.backward && rng.chance(p)) r.backward = f.backward;
  if (f.history && rng.chance(p)) r.history = f.history;
  if (f.margin && rng.chance(p)) r.margin = f.margin;
  if (f.amax && rng.chance(p)) r.amax = f.amax;
  if (f.scale && rng.chance(p)) r.scale = f.scale;
  if (f.nan && rng.chance(p)) r.nan = f.nan;
  return r;
}
LayoutSettings random_subset(Rng& rng, const LayoutSettings& f, double p) {
  LayoutSettings r;
  if (f.tp && rng.chance(p)) r.tp = f.tp;
  if (f.sp && rng.chance(p)) r.sp = f.sp;
  if (f.overlap && rng.chance(p)) r.overlap = f.overlap;
  return r;
}
DebugSettings random_subset(Rng& rng, const DebugSettings& f, double p) {
  DebugSettings r;
  if (f.stats && rng.chance(p)) r.stats = f.stats;
  if (f.fallback && rng.chance(p)) r.fallback = f.fallback;
  return r;
}

std::string settings_text(const RecipeSettings& r) {
  std::string out;
  auto add = [&](const std::string& kv) { out += (out.empty() ? "" : "  ") + kv; };
  if (r.forward) add("forward = " + s(to_string(*r.forward)));
  if (r.backward) add("backward = " + s(to_string(*r.backward)));
  if (r.history) add("history = " + std::to_string(*r.history));
  if (r.margin) add("margin = " + std::to_string(*r.margin));
  if (r.amax) add("amax = " + s(to_string(*r.amax)));
  if (r.scale) add("scale = " + s(to_string(*r.scale)));
  if (r.nan) add("nan = " + s(to_string(*r.nan)));
  return out;
}
std::string settings_text(const LayoutSettings& l) {
  std::string out;
  auto add = [&](const std::string& kv) { out += (out.empty() ? "" : "  ") + kv; };
  if (l.tp) add("tensor_parallel = " + std::to_string(*l.tp));
  if (l.sp) add(std::string("sequence_parallel = ") + (*l.sp ? "true" : "false"));
  if (l.overlap) add("overlap = " + s(to_string(*l.overlap)));
  return out;
}
std::string settings_text(const DebugSettings& d) {
  std::string out;
  auto add = [&](const std::string& kv) { out += (out.empty() ? "" : "  ") + kv; };
  if (d.stats) add(std::string("stats = ") + (*d.stats ? "true" : "false"));
  if (d.fallback) add("fallback = " + *d.fallback);
  return out;
}

std::string block(const std::string& settings) {
  return settings.empty() ? "" : " { " + settings + " }";
}

// A top-level block, one entry per line.
std::string multiline_block(const std::string& settings) {
  if (settings.empty()) return "";
  std::string out = " {\n";
  std::size_t pos = 0;
  while (pos < settings.size()) {
    std::size_t end = settings.find("  ", pos);
    if (end == std::string::npos) end = settings.size();
    out += "  " + settings.substr(pos, end - pos) + "\n";
    pos = end + 2;
  }
  return out + "}";
}

const std::vector<std::string> kFallbacks = {"none",        "all",         "fprop",
                                             "dgrad",       "wgrad",       "fprop dgrad",
                                             "fprop wgrad", "dgrad wgrad", "fprop dgrad wgrad"};

bool fallback_has(const std::string& f, const std::string& gemm) {
  return f == "all" || f.find(gemm) != std::string::npos;
}

Fp8Format random_format(Rng& rng) {
  return rng.chance(0.5) ? Fp8Format::e4m3 : Fp8Format::e5m2;
}

RecipeSettings random_recipe_settings(Rng& rng, RecipeKind kind) {
  RecipeSettings r;
  if (kind == RecipeKind::none) return r;
  const bool block = kind == RecipeKind::blockwise || kind == RecipeKind::mxfp8;
  // Block recipes' default formats are about to change: mostly written out.
  const double p_format = block ? 0.8 : 0.4;
  if (rng.chance(p_format)) r.forward = random_format(rng);
  if (rng.chance(p_format)) r.backward = random_format(rng);
  if (kind == RecipeKind::delayed) {
    if (rng.chance(0.6)) r.history = std::vector<std::uint32_t>{1, 2, 3, 4, 16, 1024}[rng.below(6)];
    if (rng.chance(0.3)) r.margin = static_cast<std::uint32_t>(rng.below(5));
    if (rng.chance(0.4)) r.amax = rng.chance(0.5) ? AmaxAlgo::max : AmaxAlgo::most_recent;
  }
  if (kind == RecipeKind::current || kind == RecipeKind::blockwise)
    if (rng.chance(0.4)) r.scale = rng.chance(0.5) ? ScaleForm::fp32 : ScaleForm::pow2;
  if (rng.chance(0.3)) r.nan = rng.chance(0.5) ? NanPolicy::propagate : NanPolicy::error;
  return r;
}

// Reuses a named item whose settings are a subset of `full` (same kind for
// recipes), or declares a new one holding a random subset; -1: write inline.
template <class Named, class Settings, class Same>
int named_ref(Rng& rng, std::vector<Named>& named, const Settings& full, Same same_kind,
              const std::string& prefix) {
  std::vector<int> fits;
  for (std::size_t i = 0; i < named.size(); ++i)
    if (same_kind(named[i]) && subset(named[i].settings, full)) fits.push_back(static_cast<int>(i));
  if (!fits.empty() && rng.chance(0.6)) return rng.pick(fits);
  Named n;
  n.name = prefix + std::to_string(named.size());
  n.settings = random_subset(rng, full, 0.6);
  named.push_back(n);
  return static_cast<int>(named.size()) - 1;
}

std::uint64_t pick_size(Rng& rng, std::uint64_t unit) {
  const std::uint64_t max_dim =
      std::vector<std::uint64_t>{256, 384, 768}[rng.weighted({6, 2.5, 1.5})];
  std::vector<std::uint64_t> friendly;
  for (std::uint64_t f : {96, 192, 384})
    if (std::lcm(unit, f) <= 768) friendly.push_back(std::lcm(unit, f));
  if (!friendly.empty() && rng.chance(0.3)) return rng.pick(friendly);
  if (unit >= max_dim) return unit;
  return unit * (1 + rng.below(max_dim / unit));
}

}  // namespace

std::uint64_t layer_in(const GenSpec& g, std::size_t i) {
  const GenLayer& l = g.layers[i];
  return l.input >= 0 ? g.layers[static_cast<std::size_t>(l.input)].out : l.in;
}
std::uint32_t layer_tp(const GenSpec&, const GenLayer& l) {
  return l.layout.tp.value_or(1);
}
bool layer_sp(const GenSpec&, const GenLayer& l) {
  return l.layout.sp.value_or(false);
}
Overlap layer_overlap(const GenSpec&, const GenLayer& l) {
  return l.layout.overlap.value_or(Overlap::none);
}
ParallelMode layer_mode(const GenLayer& l) {
  return l.mode.value_or(ParallelMode::column);
}
DType layer_dtype(const GenLayer& l) {
  return l.dtype.value_or(DType::bf16);
}
bool fp8_input(const GenSpec& g, const GenLayer& l) {
  return l.input >= 0 && g.layers[static_cast<std::size_t>(l.input)].output == "fp8" &&
         l.kind == RecipeKind::delayed;
}
std::string layer_fallback(const GenSpec&, const GenLayer& l) {
  if (l.debug_form != 2) return "none";
  return l.debug.fallback.value_or("none");
}

std::vector<std::string> rule_problems(const GenSpec& g) {
  std::vector<std::string> p;
  const int sm = target_sm(g.target);
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    const GenLayer& l = g.layers[i];
    const std::string at = "layer " + l.name + ": ";
    const std::uint64_t in = layer_in(g, i);
    const std::uint32_t tp = layer_tp(g, l);
    const bool column = layer_mode(l) == ParallelMode::column;
    const bool fp8 = l.kind != RecipeKind::none;
    if (in == 0 || l.out == 0 || in % 32 != 0 || l.out % 32 != 0)
      p.push_back(at + "sizes not multiples of 32");
    const std::uint64_t split = column ? l.out : in;
    if (split % tp != 0) {
      p.push_back(at + "split dim not divisible by tensor_parallel");
    } else if (fp8) {
      const std::uint64_t a = fp8_align(l.kind);
      if ((column ? in : in / tp) % a != 0 || (column ? l.out / tp : l.out) % a != 0)
        p.push_back(at + "FP8 per-rank size not aligned");
    }
    if (tp > 1 && !l.mode) p.push_back(at + "no mode with tensor_parallel > 1");
    if (layer_sp(g, l) && tp == 1) p.push_back(at + "sequence_parallel with one rank");
    if (layer_overlap(g, l) != Overlap::none && !layer_sp(g, l))
      p.push_back(at + "overlap without sequence_parallel");
    if (!fp8 && (l.save_input == "fp8" || l.output == "fp8"))
      p.push_back(at + "FP8-only setting on recipe none");
    if (!fp8 && layer_fallback(g, l) != "none") p.push_back(at + "fallback on recipe none");
    if (!l.recipe_written && fp8) p.push_back(at + "FP8 recipe not written");
    if (l.output != "" && l.output != "fp8" && l.output != s(to_string(layer_dtype(l))))
      p.push_back(at + "output dtype differs from dtype (consumers take the dtype)");
    if (l.kind == RecipeKind::blockwise && sm < 90) p.push_back(at + "blockwise before sm_90");
    if (l.kind == RecipeKind::mxfp8 && sm < 100) p.push_back(at + "mxfp8 before sm_100");
    if (l.gemm == "generated" && !target_sm90a(g.target))
      p.push_back(at + "gemm = generated off sm_90a");
    // Chains.
    std::vector<std::size_t> consumers;
    for (std::size_t j = 0; j < g.layers.size(); ++j)
      if (g.layers[j].input == static_cast<int>(i)) consumers.push_back(j);
    if (l.output == "fp8" &&
        (consumers.size() != 1 || g.layers[consumers[0]].kind != RecipeKind::delayed))
      p.push_back(at + "output = fp8 not into exactly one delayed consumer");
    if (l.input >= 0) {
      if (l.input == static_cast<int>(i) || l.input >= static_cast<int>(g.layers.size())) {
        p.push_back(at + "bad input index");
        continue;
      }
      const GenLayer& src = g.layers[static_cast<std::size_t>(l.input)];
      if (layer_dtype(src) != layer_dtype(l)) p.push_back(at + "dtype differs from its producer");
      const std::uint32_t stp = layer_tp(g, src);
      if (stp != tp) p.push_back(at + "tensor_parallel differs from its producer");
      if (tp > 1 || stp > 1) {
        if (layer_mode(src) == layer_mode(l)) p.push_back(at + "same mode as its producer");
        if (layer_mode(src) == ParallelMode::row && layer_sp(g, src) != layer_sp(g, l))
          p.push_back(at + "row -> column with different sequence_parallel");
      }
      if (fp8_input(g, l)) {
        if (l.save_input == "original") p.push_back(at + "FP8 input with save_input = original");
        const std::string f = layer_fallback(g, l);
        if (fallback_has(f, "fprop") || fallback_has(f, "wgrad"))
          p.push_back(at + "FP8 input with an fprop or wgrad fallback");
      }
    }
  }
  // Acyclic: inputs point to earlier layers in generation order after any
  // removal keeps them so; check by walking.
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    int at = g.layers[i].input;
    for (std::size_t n = 0; at >= 0 && n <= g.layers.size(); ++n)
      at = g.layers[static_cast<std::size_t>(at)].input;
    if (at >= 0) p.push_back("layers form a cycle");
  }
  return p;
}

GenSpec generate(std::uint64_t seed) {
  Rng rng(seed);
  return generate(rng, seed);
}

GenSpec generate(Rng& rng, std::uint64_t seed) {
  GenSpec g;
  g.seed = seed;
  g.order_seed = rng.next();
  static const std::vector<std::string> targets = {
      "", "", "", "sm_90a", "sm_90", "sm_100a", "sm_100a", "sm_100", "sm_120a", "sm_89"};
  g.target = rng.pick(targets);
  const int sm = target_sm(g.target);
  std::vector<RecipeKind> kinds = {RecipeKind::none, RecipeKind::delayed, RecipeKind::current};
  std::vector<double> kind_weights = {2, 3, 3};
  if (sm >= 90) kinds.push_back(RecipeKind::blockwise), kind_weights.push_back(2.5);
  if (sm >= 100) kinds.push_back(RecipeKind::mxfp8), kind_weights.push_back(3);

  // Shapes: parents within a component (-1: fed by the user).
  static const std::vector<std::vector<std::vector<int>>> shapes = {
      {{-1}},           // one layer
      {{-1}, {-1}},     // two independent layers
      {{-1, 0}},        // a chain of two
      {{-1, 0, 1}},     // a chain of three
      {{-1, 0, 0}},     // one producer, two consumers
      {{-1, 0}, {-1}},  // a chain of two and an independent layer
  };
  const auto& shape = shapes[rng.weighted({3, 1, 4, 2, 0.7, 1})];
  std::vector<std::string> names = {"fc1",  "fc2",      "up",     "down",     "proj", "qkv",
                                    "gate", "attn_out", "mlp_up", "mlp_down", "enc",  "dec",
                                    "a",    "b",        "c",      "l0",       "l1",   "x2"};
  for (std::size_t i = names.size(); i > 1; --i) std::swap(names[i - 1], names[rng.below(i)]);

  for (const auto& component : shape) {
    const std::size_t base = g.layers.size();
    const std::uint32_t tp = std::vector<std::uint32_t>{1, 2, 3, 4, 6, 8}[rng.below(6)];
    const bool lax = tp == 1 && rng.chance(0.4);  // modes left out: all column
    std::optional<DType> dtype;
    if (rng.chance(0.5))
      dtype = std::vector<DType>{DType::bf16, DType::fp16, DType::fp32}[rng.below(3)];
    const ParallelMode first_mode = rng.chance(0.5) ? ParallelMode::column : ParallelMode::row;
    const bool same_kind = rng.chance(0.4);
    const RecipeKind kind0 = kinds[rng.weighted(kind_weights)];
    for (int parent : component) {
      GenLayer l;
      l.name = names[g.layers.size()];
      l.input = parent < 0 ? -1 : static_cast<int>(base) + parent;
      const GenLayer* src = parent < 0 ? nullptr : &g.layers[static_cast<std::size_t>(l.input)];
      ParallelMode mode = first_mode;
      if (src)
        mode = layer_mode(*src) == ParallelMode::column ? ParallelMode::row : ParallelMode::column;
      if (lax) mode = ParallelMode::column;
      bool sp = false;
      if (tp > 1) {
        if (!src)
          sp = rng.chance(0.5);
        else if (layer_mode(*src) == ParallelMode::row)
          sp = layer_sp(g, *src);
        else
          sp = rng.chance(0.75) ? layer_sp(g, *src) : !layer_sp(g, *src);
      }
      Overlap overlap = Overlap::none;
      if (sp)
        overlap = std::vector<Overlap>{Overlap::none, Overlap::bulk, Overlap::ring}[rng.below(3)];
      l.kind = same_kind ? kind0 : kinds[rng.weighted(kind_weights)];
      l.dtype = dtype;
      // Layout as written.
      if (tp == 1) {
        const std::size_t form = rng.below(3);
        if (lax) {
          if (form == 0) {
            l.layout_written = false;
          } else {
            l.layout_written = true;
            l.layout.tp = 1;
            if (form == 2)
              l.layout_ref = named_ref(
                  rng, g.layouts, l.layout, [](const NamedLayout&) { return true; }, "grid");
          }
        } else {
          l.layout_written = true;
          l.mode = mode;
          if (form >= 1) l.layout.tp = 1;  // form 0: `layout = row`
          if (form == 2)
            l.layout_ref = named_ref(
                rng, g.layouts, l.layout, [](const NamedLayout&) { return true; }, "grid");
        }
      } else {
        l.layout_written = true;
        l.mode = mode;
        l.layout.tp = tp;
        if (sp || rng.chance(0.3)) l.layout.sp = sp;
        if (overlap != Overlap::none || (sp && rng.chance(0.3))) l.layout.overlap = overlap;
        if (rng.chance(0.4))
          l.layout_ref = named_ref(
              rng, g.layouts, l.layout, [](const NamedLayout&) { return true; }, "shard");
        // A named layout must not be empty: keep tensor_parallel in it.
        if (l.layout_ref >= 0 && g.layouts[static_cast<std::size_t>(l.layout_ref)].settings.empty())
          g.layouts[static_cast<std::size_t>(l.layout_ref)].settings.tp = tp;
      }
      if (l.layout_ref >= 0 && g.layouts[static_cast<std::size_t>(l.layout_ref)].settings.empty())
        g.layouts[static_cast<std::size_t>(l.layout_ref)].settings.tp = l.layout.tp;
      g.layers.push_back(l);
    }
  }

  // Sizes: every split dim whole on tensor_parallel ranks, FP8 per-rank sizes
  // aligned, a consumer's `in` its producer's `out`.
  const auto split_unit = [&](const GenLayer& l) {
    return std::lcm<std::uint64_t>(32, layer_tp(g, l) * fp8_align(l.kind));
  };
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    GenLayer& l = g.layers[i];
    if (l.input < 0) l.in = pick_size(rng, layer_mode(l) == ParallelMode::row ? split_unit(l) : 32);
    std::uint64_t unit = layer_mode(l) == ParallelMode::column ? split_unit(l) : 32;
    for (const GenLayer& c : g.layers)
      if (&c != &l && c.input == static_cast<int>(i) && layer_mode(c) == ParallelMode::row)
        unit = std::lcm(unit, split_unit(c));
    // Consumers not yet in the list are covered: shapes add consumers after
    // their producer, and all of a component's layers exist by now.
    l.out = pick_size(rng, unit);
  }

  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    GenLayer& l = g.layers[i];
    const bool fp8 = l.kind != RecipeKind::none;
    std::vector<std::size_t> consumers;
    for (std::size_t j = 0; j < g.layers.size(); ++j)
      if (g.layers[j].input == static_cast<int>(i)) consumers.push_back(j);
    if (fp8 && consumers.size() == 1 && g.layers[consumers[0]].kind == RecipeKind::delayed &&
        rng.chance(0.45))
      l.output = "fp8";
    else if (rng.chance(0.15))
      l.output = s(to_string(layer_dtype(l)));
    if (l.input >= 0) l.write_in = rng.chance(0.5);
    if (rng.chance(0.6)) l.bias = rng.chance(0.5);
    if (rng.chance(0.6))
      l.activation = std::vector<Activation>{Activation::none, Activation::relu, Activation::gelu,
                                             Activation::silu}[rng.below(4)];
    // Recipe.
    l.recipe = random_recipe_settings(rng, l.kind);
    l.recipe_written = fp8 || rng.chance(0.7);
    if (l.recipe_written && rng.chance(fp8 ? 0.35 : 0.1)) {
      const RecipeKind kind = l.kind;
      l.recipe_ref = named_ref(
          rng, g.recipes, l.recipe, [kind](const NamedRecipe& n) { return n.kind == kind; },
          "hybrid");
      g.recipes[static_cast<std::size_t>(l.recipe_ref)].kind = kind;
    }
    if (rng.chance(0.1)) l.one_line = true;
    if (l.gemm.empty()) {
      const double r = static_cast<double>(rng.below(100)) / 100.0;
      if (target_sm90a(g.target))
        l.gemm = r < 0.65 ? "" : r < 0.8 ? "cublaslt" : "generated";
      else
        l.gemm = r < 0.85 ? "" : "cublaslt";
    }
  }
  // save_input and debug need to know which layers take FP8 input.
  for (auto& l : g.layers) {
    const bool fp8 = l.kind != RecipeKind::none;
    const bool fp8_in = fp8_input(g, l);
    const double r = static_cast<double>(rng.below(100)) / 100.0;
    if (fp8)
      l.save_input = r < 0.5 ? "" : r < 0.75 || fp8_in ? "fp8" : "original";
    else
      l.save_input = r < 0.7 ? "" : "original";
    const std::size_t form = rng.weighted({5, 1, 4});
    l.debug_form = static_cast<int>(form);
    if (form == 2) {
      if (rng.chance(0.6)) l.debug.stats = rng.chance(0.7);
      if (fp8 && rng.chance(0.7)) {
        std::vector<std::string> allowed;
        for (const auto& f : kFallbacks)
          if (!fp8_in || (!fallback_has(f, "fprop") && !fallback_has(f, "wgrad")))
            allowed.push_back(f);
        l.debug.fallback = rng.pick(allowed);
      } else if (!fp8 && rng.chance(0.2)) {
        l.debug.fallback = "none";
      }
      if (l.debug.empty()) l.debug.stats = true;
      if (rng.chance(0.35)) {
        l.debug_ref = named_ref(
            rng, g.debugs, l.debug, [](const NamedDebug&) { return true; }, "inspect");
        auto& named = g.debugs[static_cast<std::size_t>(l.debug_ref)].settings;
        if (named.empty()) named.stats = l.debug.stats.value_or(false), l.debug.stats = named.stats;
      }
    }
  }
  return g;
}

std::string render(const GenSpec& g) {
  Rng rng(g.order_seed);
  std::ostringstream head;
  head << "# plan fuzz seed " << g.seed;
  if (!g.twist.empty()) head << " (lenient: " << g.twist << ")";
  head << "\n";
  std::vector<std::string> decls;
  if (!g.target.empty()) decls.push_back("target = " + g.target + "\n");
  for (const auto& r : g.recipes)
    decls.push_back("recipe " + r.name + " = " + s(to_string(r.kind)) +
                    multiline_block(settings_text(r.settings)) + "\n");
  for (const auto& l : g.layouts)
    decls.push_back("layout " + l.name + " =" + multiline_block(settings_text(l.settings)) + "\n");
  for (const auto& d : g.debugs)
    decls.push_back("debug " + d.name + " =" + multiline_block(settings_text(d.settings)) + "\n");
  const std::size_t named_count = decls.size();
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    const GenLayer& l = g.layers[i];
    std::vector<std::string> entries;
    if (l.input < 0 || l.write_in) entries.push_back("in = " + std::to_string(layer_in(g, i)));
    entries.push_back("out = " + std::to_string(l.out));
    if (l.input >= 0)
      entries.push_back("input = " + g.layers[static_cast<std::size_t>(l.input)].name);
    if (l.bias) entries.push_back(std::string("bias = ") + (*l.bias ? "true" : "false"));
    if (l.activation) entries.push_back("activation = " + s(to_string(*l.activation)));
    if (l.dtype) entries.push_back("dtype = " + s(to_string(*l.dtype)));
    if (!l.output.empty()) entries.push_back("output = " + l.output);
    if (l.recipe_written) {
      if (l.recipe_ref >= 0) {
        const NamedRecipe& n = g.recipes[static_cast<std::size_t>(l.recipe_ref)];
        entries.push_back("recipe = " + n.name + block(settings_text(minus(l.recipe, n.settings))));
      } else {
        entries.push_back("recipe = " + s(to_string(l.kind)) + block(settings_text(l.recipe)));
      }
    }
    if (l.layout_written) {
      std::string v;
      if (l.layout_ref >= 0) {
        const NamedLayout& n = g.layouts[static_cast<std::size_t>(l.layout_ref)];
        v = n.name + block(settings_text(minus(l.layout, n.settings)));
      } else if (!l.layout.empty()) {
        v = "{ " + settings_text(l.layout) + " }";
      }
      if (l.mode) v += (v.empty() ? "" : " ") + s(to_string(*l.mode));
      entries.push_back("layout = " + v);
    }
    if (!l.save_input.empty()) entries.push_back("save_input = " + l.save_input);
    if (!l.gemm.empty()) entries.push_back("gemm = " + l.gemm);
    if (l.debug_form == 1) {
      entries.push_back("debug = off");
    } else if (l.debug_form == 2) {
      if (l.debug_ref >= 0) {
        const NamedDebug& n = g.debugs[static_cast<std::size_t>(l.debug_ref)];
        entries.push_back("debug = " + n.name + block(settings_text(minus(l.debug, n.settings))));
      } else {
        entries.push_back("debug = { " + settings_text(l.debug) + " }");
      }
    }
    if (!g.canonical && rng.chance(0.25))
      for (std::size_t k = entries.size(); k > 1; --k)
        std::swap(entries[k - 1], entries[rng.below(k)]);
    std::string text = "layer " + l.name + " = linear {";
    if (l.one_line) {
      for (const auto& e : entries) text += " " + e;
      text += " }\n";
    } else {
      text += "\n";
      for (const auto& e : entries) text += "  " + e + "\n";
      text += "}\n";
    }
    decls.push_back(text);
  }
  // Mostly named declarations first, then layers in order; sometimes any order
  // (names and producers may be used before they are declared).
  std::vector<std::size_t> order(decls.size());
  std::iota(order.begin(), order.end(), 0);
  if (g.canonical) {
  } else if (rng.chance(0.3)) {
    for (std::size_t k = order.size(); k > 1; --k) std::swap(order[k - 1], order[rng.below(k)]);
  } else if (rng.chance(0.2) && decls.size() > named_count + 1) {
    std::reverse(order.begin() + static_cast<std::ptrdiff_t>(named_count), order.end());
  }
  std::string out = head.str();
  for (std::size_t k = 0; k < order.size(); ++k) out += (k ? "\n" : "") + decls[order[k]];
  return out;
}

std::string apply_twist(Rng& rng, GenSpec& g) {
  const auto consumers_of = [&](std::size_t i) {
    std::vector<std::size_t> c;
    for (std::size_t j = 0; j < g.layers.size(); ++j)
      if (g.layers[j].input == static_cast<int>(i)) c.push_back(j);
    return c;
  };
  const auto make_delayed = [&](GenLayer& l) {
    if (l.kind == RecipeKind::delayed) return;
    l.kind = RecipeKind::delayed;
    l.recipe = {};
    l.recipe_ref = -1;
    l.recipe_written = true;
  };
  // A producer handing FP8 to exactly one delayed consumer (made so when a
  // producer with one consumer exists); returns the consumer.
  const auto fp8_chain = [&]() -> GenLayer* {
    for (std::size_t i = 0; i < g.layers.size(); ++i) {
      GenLayer& p = g.layers[i];
      const auto c = consumers_of(i);
      if (p.kind == RecipeKind::none || c.size() != 1) continue;
      GenLayer& consumer = g.layers[c[0]];
      if (consumer.kind == RecipeKind::none) continue;  // sizes may not suit FP8
      make_delayed(consumer);
      p.output = "fp8";
      return &consumer;
    }
    return nullptr;
  };
  std::vector<std::string> names = {"fp8 output into a non-delayed consumer",
                                    "fp8 output into nothing",
                                    "fp8 output into two delayed consumers",
                                    "fp8 input with save_input = original",
                                    "fp8 input with an fprop/wgrad fallback",
                                    "fp8 output into another dtype",
                                    "sequence_parallel on one rank",
                                    "overlap without sequence_parallel",
                                    "fallback on recipe none",
                                    "mxfp8 before sm_100"};
  for (std::size_t k = names.size(); k > 1; --k) std::swap(names[k - 1], names[rng.below(k)]);
  for (const std::string& name : names) {
    bool applied = false;
    if (name == "fp8 output into a non-delayed consumer") {
      for (std::size_t i = 0; i < g.layers.size() && !applied; ++i) {
        const auto c = consumers_of(i);
        if (g.layers[i].kind != RecipeKind::none && c.size() == 1 &&
            g.layers[c[0]].kind != RecipeKind::none && g.layers[c[0]].kind != RecipeKind::delayed)
          g.layers[i].output = "fp8", applied = true;
      }
    } else if (name == "fp8 output into nothing") {
      for (std::size_t i = 0; i < g.layers.size() && !applied; ++i)
        if (g.layers[i].kind != RecipeKind::none && consumers_of(i).empty())
          g.layers[i].output = "fp8", applied = true;
    } else if (name == "fp8 output into two delayed consumers") {
      for (std::size_t i = 0; i < g.layers.size() && !applied; ++i) {
        const auto c = consumers_of(i);
        if (g.layers[i].kind == RecipeKind::none || c.size() < 2) continue;
        for (std::size_t j : c) make_delayed(g.layers[j]);
        g.layers[i].output = "fp8";
        applied = true;
      }
    } else if (name == "fp8 input with save_input = original") {
      if (GenLayer* c = fp8_chain()) c->save_input = "original", applied = true;
    } else if (name == "fp8 input with an fprop/wgrad fallback") {
      if (GenLayer* c = fp8_chain()) {
        c->debug_form = 2;
        c->debug_ref = -1;
        c->debug.fallback = std::vector<std::string>{"fprop", "wgrad", "all", "fprop dgrad",
                                                     "dgrad wgrad"}[rng.below(5)];
        applied = true;
      }
    } else if (name == "fp8 output into another dtype") {
      for (std::size_t i = 0; i < g.layers.size() && !applied; ++i) {
        const auto c = consumers_of(i);
        if (c.size() != 1 || !consumers_of(c[0]).empty()) continue;
        if (g.layers[i].kind == RecipeKind::none || g.layers[c[0]].kind == RecipeKind::none)
          continue;
        make_delayed(g.layers[c[0]]);
        g.layers[i].output = "fp8";
        const DType d = layer_dtype(g.layers[i]);
        g.layers[c[0]].dtype = d == DType::bf16 ? DType::fp16 : DType::bf16;
        if (g.layers[c[0]].output != "" && g.layers[c[0]].output != "fp8")
          g.layers[c[0]].output.clear();
        applied = true;
      }
    } else if (name == "sequence_parallel on one rank") {
      for (auto& l : g.layers) {
        if (layer_tp(g, l) != 1) continue;
        l.layout_written = true;
        l.layout_ref = -1;
        l.layout.tp = 1;
        l.layout.sp = true;
        applied = true;
        break;
      }
    } else if (name == "overlap without sequence_parallel") {
      for (auto& l : g.layers) {
        if (layer_tp(g, l) == 1 || layer_sp(g, l)) continue;
        l.layout_ref = -1;
        l.layout.overlap = rng.chance(0.5) ? Overlap::bulk : Overlap::ring;
        applied = true;
        break;
      }
    } else if (name == "fallback on recipe none") {
      for (auto& l : g.layers) {
        if (l.kind != RecipeKind::none) continue;
        l.debug_form = 2;
        l.debug_ref = -1;
        l.debug.fallback = rng.pick(std::vector<std::string>{"fprop", "dgrad", "wgrad", "all"});
        applied = true;
        break;
      }
    } else if (name == "mxfp8 before sm_100") {
      bool mx = false;
      for (const auto& l : g.layers) mx = mx || l.kind == RecipeKind::mxfp8;
      if (mx) g.target = rng.chance(0.5) ? "" : "sm_90a", applied = true;
    }
    if (applied) {
      g.twist = name;
      return name;
    }
  }
  return "";
}

std::string describe(const GenSpec& g) {
  std::string out = g.twist.empty() ? "" : "{" + g.twist + "} ";
  out += g.target.empty() ? "" : g.target + ": ";
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    const GenLayer& l = g.layers[i];
    if (i) out += " | ";
    out += l.name + " " + s(to_string(l.kind)) + " " + s(to_string(layer_mode(l))) + " tp" +
           std::to_string(layer_tp(g, l)) + (layer_sp(g, l) ? " sp" : "") + " " +
           std::to_string(layer_in(g, i)) + "x" + std::to_string(l.out);
    if (l.input >= 0) out += " <- " + g.layers[static_cast<std::size_t>(l.input)].name;
    if (l.output == "fp8") out += " fp8-out";
  }
  return out;
}

}  // namespace fp8c::planfuzz
