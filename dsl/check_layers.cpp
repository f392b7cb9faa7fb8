// One layer's own settings: `layer NAME = linear { key = value ... }`.
// What must hold between layers is check_graph.cpp's.

#include "dsl/checker.hpp"

namespace fp8c::dsl {
namespace {

// The largest `in` or `out`: per-rank sizes index 32-bit grids.
constexpr std::uint64_t kMaxFeatures = (std::uint64_t{1} << 31) - 1;

const std::vector<std::string_view> kLayerKeys = {
    "in",     "out",   "bias",       "activation", "dtype",        "output", "recipe",
    "layout", "input", "save_input", "gemm",       "weight_cache", "debug"};

const std::vector<std::pair<std::string_view, std::string_view>> kLayerKeysElsewhere = {
    {"forward", "recipes: write `recipe = current { forward = e4m3 }`"},
    {"backward", "recipes: write `recipe = current { backward = e5m2 }`"},
    {"history", "delayed recipes"},
    {"margin", "delayed recipes"},
    {"tensor_parallel", "layouts: write `layout = { tensor_parallel = 8 } column`"},
    {"sequence_parallel", "layouts: write `layout = { sequence_parallel = true } column`"},
    {"overlap", "layouts"},
    {"stats", "debug blocks: write `debug = { stats = true }`"},
    {"fallback", "debug blocks: write `debug = { fallback = wgrad }`"}};

const std::vector<std::string_view> kLayerKinds = {"linear"};

}  // namespace

std::optional<Layer> Checker::layer(const ast::Declaration& declaration, LayerSite& site) {
  const std::size_t errors = diagnostics_.error_count();
  const auto& atoms = declaration.value;
  const ast::Atom& head = atoms.front();
  if (head.kind != ast::Atom::Kind::word || head.text != "linear") {
    if (head.kind == ast::Atom::Kind::word)
      read_.unknown_word(head, "layer kind", kLayerKinds);
    else
      diagnostics_.error(head.where, "expected a layer kind (linear) before " + describe(head));
    return std::nullopt;
  }
  if (atoms.size() < 2 || atoms[1].kind != ast::Atom::Kind::block) {
    const SourceRange where = atoms.size() < 2 ? head.where : atoms[1].where;
    diagnostics_.error(where, "expected '{' with the layer's settings after 'linear'");
    return std::nullopt;
  }
  if (atoms.size() > 2) {
    diagnostics_.error(atoms[2].where,
                       "unexpected " + describe(atoms[2]) + " after the layer's block");
    return std::nullopt;
  }

  Layer layer;
  layer.name = declaration.name.text;
  const std::string block_name = "layer '" + layer.name + "'";
  const KeySet keys{block_name, kLayerKeys, kLayerKeysElsewhere};
  for_each_entry(diagnostics_, *atoms[1].block, keys, [&](const ast::Entry& entry) {
    site.entries[entry.key.text] = &entry;
    layer_entry(entry, layer);
  });

  if (!site.entries.count("out")) {
    diagnostics_.error(declaration.name.where, "layer '" + layer.name + "' needs `out = N`");
  }
  if (!site.entries.count("in") && !site.entries.count("input")) {
    diagnostics_.error(
        declaration.name.where,
        "layer '" + layer.name + "' needs `in = N` (or `input = LAYER`, which gives it)");
  }
  // With no `output`, or `output = fp8` (when it is not honoured, the output
  // is written in the layer's own dtype), the output dtype is the layer's.
  if (!site.entries.count("output") || layer.output_fp8) layer.output_dtype = layer.dtype;
  if (!site.entries.count("save_input"))
    layer.save_input = layer.recipe.is_fp8() ? SaveInput::fp8 : SaveInput::original;
  if (diagnostics_.error_count() != errors) return std::nullopt;
  return layer;
}

void Checker::layer_entry(const ast::Entry& entry, Layer& layer) {
  const std::string& key = entry.key.text;
  if (key == "recipe") {
    if (auto recipe = recipe_value(entry.value)) layer.recipe = *recipe;
    return;
  }
  if (key == "layout") {
    layer_layout(entry, layer);
    return;
  }
  if (key == "debug") {
    if (auto debug = debug_value(entry.value)) layer.debug = *debug;
    return;
  }
  const ast::Atom* atom = read_.single(entry);
  if (!atom) return;
  if (key == "in") {
    if (auto v = read_.integer(*atom, "in", 1, kMaxFeatures)) layer.in = *v;
  } else if (key == "out") {
    if (auto v = read_.integer(*atom, "out", 1, kMaxFeatures)) layer.out = *v;
  } else if (key == "bias") {
    if (auto v = read_.boolean(*atom, "bias")) layer.bias = *v;
  } else if (key == "activation") {
    if (auto v = read_.word<Activation>(*atom, "activation")) layer.activation = *v;
  } else if (key == "dtype") {
    if (auto v = read_.word<DTypeWords>(*atom, "dtype")) layer.dtype = *v;
  } else if (key == "output") {
    if (atom->kind == ast::Atom::Kind::word && atom->text == "fp8") {
      layer.output_fp8 = true;
    } else if (read_.expect_word(*atom, "an output type (fp8, bf16, fp16 or fp32)")) {
      bool found = false;
      for (const auto& [word, dtype] : names<DTypeWords>()) {
        if (word == atom->text) {
          layer.output_dtype = dtype;
          found = true;
        }
      }
      if (!found) read_.unknown_word(*atom, "output type", {"fp8", "bf16", "fp16", "fp32"});
    }
  } else if (key == "save_input") {
    if (auto v = read_.word<SaveInput>(*atom, "save_input")) layer.save_input = *v;
  } else if (key == "input") {
    if (read_.expect_word(*atom, "the name of the layer that feeds this one"))
      layer.input = atom->text;
  } else if (key == "gemm") {
    if (auto v = read_.word<GemmBackend>(*atom, "GEMM backend")) layer.gemm = *v;
  } else if (key == "weight_cache") {
    if (auto v = read_.boolean(*atom, "weight_cache")) layer.weight_cache = *v;
  }
}

// `layout = [NAME] [{ ... }] [column|row]`; the mode may be left out only when
// the layout has a single rank.
void Checker::layer_layout(const ast::Entry& entry, Layer& layer) {
  std::vector<ast::Atom> atoms = entry.value;
  std::optional<ParallelMode> mode;
  const ast::Atom& last = atoms.back();
  if (last.kind == ast::Atom::Kind::word) {
    for (const auto& [word, m] : names<ParallelMode>())
      if (word == last.text) mode = m;
    if (mode) atoms.pop_back();
  }
  if (!mode && atoms.size() > 1 && last.kind == ast::Atom::Kind::word) {
    diagnostics_.error(last.where, "unknown parallel mode " + quoted(last.text) +
                                       did_you_mean(last.text, {"column", "row"}) +
                                       " (a layout ends with column or row)");
    return;
  }
  std::optional<Layout> layout = Layout{};
  if (!atoms.empty()) layout = layout_value(atoms);
  if (!layout) return;
  if (!mode && layout->tensor_parallel > 1) {
    diagnostics_.error(last.where, "expected 'column' or 'row' after the layout: with " +
                                       std::to_string(layout->tensor_parallel) +
                                       " ranks the layer must say how its weight is split");
    return;
  }
  layer.layout = *layout;
  layer.mode = mode.value_or(ParallelMode::column);
}

}  // namespace fp8c::dsl
