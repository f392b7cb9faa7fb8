// Recipes, layouts and debug blocks, named or inline. A value is
//   KIND_OR_NAME [ { overrides } ]   for recipes, e.g. `current { margin = 0 }`
//   [NAME] [ { settings } ]          for layouts and debug blocks
// A named setting may refine another: `recipe strict = hybrid { nan = error }`.

#include <algorithm>

#include "dsl/checker.hpp"

namespace fp8c::dsl {
namespace {

constexpr std::uint64_t kMaxHistory = 65536;
constexpr std::uint64_t kMaxMargin = 64;
constexpr std::uint64_t kMaxTensorParallel = 4096;

std::vector<std::string_view> recipe_keys(RecipeKind kind) {
  switch (kind) {
    case RecipeKind::none:
      return {};
    case RecipeKind::delayed:
      return {"forward", "backward", "history", "amax", "margin", "nan"};
    case RecipeKind::current:
    case RecipeKind::blockwise:
      return {"forward", "backward", "scale", "nan"};
    case RecipeKind::mxfp8:
      return {"forward", "backward", "nan"};
  }
  return {};
}

std::string recipe_block_name(RecipeKind kind) {
  return std::string(kind == RecipeKind::none ? "a 'none' recipe (it has no settings)"
                                              : "a " + std::string(to_string(kind)) + " recipe");
}

// Where a key that is not allowed in this kind of recipe does belong.
std::vector<std::pair<std::string_view, std::string_view>> recipe_keys_elsewhere() {
  return {{"forward", "FP8 recipes"},
          {"backward", "FP8 recipes"},
          {"history", "delayed recipes (the amax history)"},
          {"amax", "delayed recipes (how the history is reduced)"},
          {"margin", "delayed recipes"},
          {"scale", "current and blockwise recipes (mxfp8 scales are always E8M0)"},
          {"nan", "FP8 recipes"},
          {"tensor_parallel", "layouts"},
          {"sequence_parallel", "layouts"},
          {"overlap", "layouts"}};
}

}  // namespace

bool Checker::enter_definition(const std::string& kind, const std::string& label,
                               const std::string& name, SourceRange where) {
  const std::string key = kind + " " + name;
  const auto first = std::find(resolving_.begin(), resolving_.end(), key);
  if (first == resolving_.end()) {
    resolving_.push_back(key);
    return true;
  }
  std::string message = label + " '" + name + "' is defined in terms of itself";
  if (first + 1 != resolving_.end()) {  // through others: name them in order
    message += ": ";
    for (auto it = first; it != resolving_.end(); ++it)
      message += it->substr(kind.size() + 1) + " -> ";
    message += name;
  }
  diagnostics_.error(where, message);
  return false;
}

void Checker::apply_recipe_block(const ast::Block& block, Recipe& recipe) {
  const std::string name = recipe_block_name(recipe.kind);
  const KeySet keys{name, recipe_keys(recipe.kind), recipe_keys_elsewhere()};
  for_each_entry(diagnostics_, block, keys, [&](const ast::Entry& entry) {
    const ast::Atom* atom = read_.single(entry);
    if (!atom) return;
    const std::string& key = entry.key.text;
    if (key == "forward") {
      if (auto v = read_.word<Fp8FormatWords>(*atom, "FP8 format")) recipe.forward = *v;
    } else if (key == "backward") {
      if (auto v = read_.word<Fp8FormatWords>(*atom, "FP8 format")) recipe.backward = *v;
    } else if (key == "history") {
      if (auto v = read_.integer(*atom, "history", 1, kMaxHistory))
        recipe.history = static_cast<std::uint32_t>(*v);
    } else if (key == "amax") {
      if (auto v = read_.word<AmaxAlgo>(*atom, "amax algorithm")) recipe.amax = *v;
    } else if (key == "margin") {
      if (auto v = read_.integer(*atom, "margin", 0, kMaxMargin))
        recipe.margin = static_cast<std::uint32_t>(*v);
    } else if (key == "scale") {
      if (auto v = read_.word<ScaleForm>(*atom, "scale form")) recipe.scale = *v;
    } else if (key == "nan") {
      if (auto v = read_.word<NanPolicy>(*atom, "NaN policy")) recipe.nan = *v;
    }
  });
}

void Checker::apply_layout_block(const ast::Block& block, Layout& layout) {
  const KeySet keys{"a layout",
                    {"tensor_parallel", "sequence_parallel", "overlap"},
                    {{"forward", "recipes"},
                     {"backward", "recipes"},
                     {"column", "a layer's `layout = NAME column`"}}};
  for_each_entry(diagnostics_, block, keys, [&](const ast::Entry& entry) {
    const ast::Atom* atom = read_.single(entry);
    if (!atom) return;
    const std::string& key = entry.key.text;
    if (key == "tensor_parallel") {
      if (auto v = read_.integer(*atom, "tensor_parallel", 1, kMaxTensorParallel))
        layout.tensor_parallel = static_cast<std::uint32_t>(*v);
    } else if (key == "sequence_parallel") {
      if (auto v = read_.boolean(*atom, "sequence_parallel")) layout.sequence_parallel = *v;
    } else if (key == "overlap") {
      if (auto v = read_.word<Overlap>(*atom, "overlap")) layout.overlap = *v;
    }
  });
}

void Checker::apply_debug_block(const ast::Block& block, Debug& debug) {
  const KeySet keys{"a debug block", {"stats", "fallback"}, {}};
  for_each_entry(diagnostics_, block, keys, [&](const ast::Entry& entry) {
    if (entry.key.text == "stats") {
      if (const ast::Atom* atom = read_.single(entry))
        if (auto v = read_.boolean(*atom, "stats")) debug.stats = *v;
      return;
    }
    // fallback = none | all | one or more of fprop dgrad wgrad
    debug.fallback.clear();
    for (const auto& atom : entry.value) {
      if (atom.kind == ast::Atom::Kind::word && (atom.text == "none" || atom.text == "all")) {
        if (entry.value.size() > 1) {
          diagnostics_.error(atom.where, "'" + atom.text + "' cannot be combined with other GEMMs");
          return;
        }
        if (atom.text == "all")
          debug.fallback = {GemmKind::fprop, GemmKind::dgrad, GemmKind::wgrad};
        return;
      }
      auto gemm = read_.word<GemmKind>(atom, "GEMM");
      if (!gemm) return;
      if (std::find(debug.fallback.begin(), debug.fallback.end(), *gemm) != debug.fallback.end()) {
        diagnostics_.error(atom.where, "'" + atom.text + "' is listed twice");
        return;
      }
      debug.fallback.push_back(*gemm);
    }
    std::sort(debug.fallback.begin(), debug.fallback.end());
  });
}

std::optional<Recipe> Checker::named_recipe(const ast::Atom& reference) {
  const std::string& name = reference.text;
  if (auto done = recipes_.find(name); done != recipes_.end()) return done->second;
  const auto declared = recipe_declarations_.find(name);
  if (declared == recipe_declarations_.end()) {
    std::vector<std::string_view> candidates;
    for (const auto& [word, kind] : names<RecipeKind>()) candidates.push_back(word);
    for (const auto& [n, d] : recipe_declarations_) candidates.push_back(n);
    read_.unknown_word(reference, "recipe", candidates);
    return std::nullopt;
  }
  if (!enter_definition("recipe", "recipe", name, reference.where)) return std::nullopt;
  std::optional<Recipe> recipe = recipe_value(declared->second->value);
  resolving_.pop_back();
  if (recipe) recipe->name = name;
  recipes_[name] = recipe;
  return recipe;
}

std::optional<Recipe> Checker::recipe_value(const std::vector<ast::Atom>& atoms) {
  const ast::Atom& head = atoms.front();
  if (head.kind == ast::Atom::Kind::block) {
    diagnostics_.error(head.where,
                       "expected a recipe kind before '{' (none, delayed, current, "
                       "blockwise or mxfp8)");
    return std::nullopt;
  }
  if (!read_.expect_word(head, "a recipe kind or the name of a recipe")) return std::nullopt;
  if (atoms.size() > 2 || (atoms.size() == 2 && atoms[1].kind != ast::Atom::Kind::block)) {
    const ast::Atom& extra = atoms[atoms.size() == 2 ? 1 : 2];
    diagnostics_.error(extra.where, "unexpected " + describe(extra) +
                                        ": a recipe is a kind or a name, then an optional { ... }");
    return std::nullopt;
  }
  std::optional<Recipe> recipe;
  for (const auto& [word, kind] : names<RecipeKind>()) {
    if (word == head.text) recipe = default_recipe(kind);
  }
  if (!recipe) recipe = named_recipe(head);
  if (!recipe) return std::nullopt;
  if (atoms.size() == 2) {
    recipe->name.clear();  // refined inline: no longer the named recipe
    const std::size_t errors = diagnostics_.error_count();
    apply_recipe_block(*atoms[1].block, *recipe);
    if (diagnostics_.error_count() != errors) return std::nullopt;
  }
  return recipe;
}

std::optional<Layout> Checker::named_layout(const ast::Atom& reference) {
  const std::string& name = reference.text;
  if (auto done = layouts_.find(name); done != layouts_.end()) return done->second;
  const auto declared = layout_declarations_.find(name);
  if (declared == layout_declarations_.end()) {
    std::vector<std::string_view> candidates;
    for (const auto& [n, d] : layout_declarations_) candidates.push_back(n);
    read_.unknown_word(reference, "layout", candidates);
    return std::nullopt;
  }
  if (!enter_definition("layout", "layout", name, reference.where)) return std::nullopt;
  std::optional<Layout> layout = layout_value(declared->second->value);
  resolving_.pop_back();
  if (layout) layout->name = name;
  layouts_[name] = layout;
  return layout;
}

std::optional<Layout> Checker::layout_value(const std::vector<ast::Atom>& atoms) {
  std::optional<Layout> layout = Layout{};
  std::size_t i = 0;
  if (atoms[i].kind == ast::Atom::Kind::word) {
    layout = named_layout(atoms[i]);
    ++i;
  }
  if (i < atoms.size() && atoms[i].kind == ast::Atom::Kind::block) {
    if (layout) {
      layout->name.clear();
      const std::size_t errors = diagnostics_.error_count();
      apply_layout_block(*atoms[i].block, *layout);
      if (diagnostics_.error_count() != errors) layout.reset();
    }
    ++i;
  }
  if (i == 0) {
    diagnostics_.error(atoms[0].where,
                       "expected a layout name or { ... }, found " + describe(atoms[0]));
    return std::nullopt;
  }
  if (i < atoms.size()) {
    diagnostics_.error(atoms[i].where,
                       "unexpected " + describe(atoms[i]) + ": a layout is a name and/or { ... }");
    return std::nullopt;
  }
  return layout;
}

std::optional<Debug> Checker::named_debug(const ast::Atom& reference) {
  const std::string& name = reference.text;
  if (auto done = debugs_.find(name); done != debugs_.end()) return done->second;
  const auto declared = debug_declarations_.find(name);
  if (declared == debug_declarations_.end()) {
    std::vector<std::string_view> candidates;
    for (const auto& [n, d] : debug_declarations_) candidates.push_back(n);
    read_.unknown_word(reference, "debug block", candidates);
    return std::nullopt;
  }
  if (!enter_definition("debug", "debug block", name, reference.where)) return std::nullopt;
  std::optional<Debug> debug = debug_value(declared->second->value);
  resolving_.pop_back();
  if (debug) debug->name = name;
  debugs_[name] = debug;
  return debug;
}

std::optional<Debug> Checker::debug_value(const std::vector<ast::Atom>& atoms) {
  std::optional<Debug> debug = Debug{};
  std::size_t i = 0;
  if (atoms[i].kind == ast::Atom::Kind::word) {
    if (atoms[i].text != "off") debug = named_debug(atoms[i]);
    ++i;
  }
  if (i < atoms.size() && atoms[i].kind == ast::Atom::Kind::block) {
    if (debug) {
      debug->name.clear();
      const std::size_t errors = diagnostics_.error_count();
      apply_debug_block(*atoms[i].block, *debug);
      if (diagnostics_.error_count() != errors) debug.reset();
    }
    ++i;
  }
  if (i == 0) {
    diagnostics_.error(atoms[0].where,
                       "expected a debug block name or { ... }, found " + describe(atoms[0]));
    return std::nullopt;
  }
  if (i < atoms.size()) {
    diagnostics_.error(atoms[i].where, "unexpected " + describe(atoms[i]) +
                                           ": a debug setting is a name and/or { ... }");
    return std::nullopt;
  }
  return debug;
}

void Checker::resolve_named_settings() {
  for (const auto* declaration : declaration_order_) {
    const ast::Atom name{ast::Atom::Kind::word, declaration->name.text, nullptr,
                         declaration->name.where};
    const std::string& kind = declaration->kind.text;
    if (kind == "recipe") named_recipe(name);
    if (kind == "layout") named_layout(name);
    if (kind == "debug") named_debug(name);
  }
}

}  // namespace fp8c::dsl
