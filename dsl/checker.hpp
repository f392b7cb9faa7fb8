// The checker: AST -> Spec. Runs in three passes, each in its own file:
//   checker.cpp          collects declarations and the target, drives the passes
//   check_settings.cpp   named and inline recipes, layouts and debug blocks
//   check_layers.cpp     each layer's own keys
//   check_graph.cpp      what holds between layers: input references, cycles,
//                        shapes and dtypes along a chain, FP8 hand-over,
//                        parallel layouts, the target
// Every error points at the atom that is wrong; checking goes on after an
// error so that one run reports everything it can.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include "dsl/ast.hpp"
#include "dsl/values.hpp"
#include "fp8c/dsl.hpp"
#include "fp8c/spec.hpp"

namespace fp8c::dsl {

// Where a layer's settings were written, for messages about them later.
struct LayerSite {
  const ast::Declaration* declaration = nullptr;
  std::map<std::string, const ast::Entry*> entries;  // key -> entry, for keys that were set
  SourceRange name() const { return declaration->name.where; }
  // The value of `key` if it was written, else the layer's name.
  SourceRange value_or_name(const std::string& key) const;
  SourceRange key_or_name(const std::string& key) const;
};

class Checker {
 public:
  Checker(const SourceFile& file, Diagnostics& diagnostics, const CheckOptions& options);
  std::optional<Spec> check(const ast::File& file);

 private:
  // checker.cpp
  void collect(const ast::File& file);
  void check_target();
  void check_backend();

  // check_settings.cpp: `atoms` is a whole value such as `hybrid`,
  // `current { forward = e4m3 }` or `{ tensor_parallel = 8 }`.
  std::optional<Recipe> recipe_value(const std::vector<ast::Atom>& atoms);
  std::optional<Layout> layout_value(const std::vector<ast::Atom>& atoms);
  std::optional<Debug> debug_value(const std::vector<ast::Atom>& atoms);
  std::optional<Recipe> named_recipe(const ast::Atom& reference);
  std::optional<Layout> named_layout(const ast::Atom& reference);
  std::optional<Debug> named_debug(const ast::Atom& reference);
  void apply_recipe_block(const ast::Block& block, Recipe& recipe);
  void apply_layout_block(const ast::Block& block, Layout& layout);
  void apply_debug_block(const ast::Block& block, Debug& debug);
  void resolve_named_settings();
  // Marks `kind name` as being resolved; false (with an error naming the
  // chain) when it already is, i.e. it is defined in terms of itself.
  bool enter_definition(const std::string& kind, const std::string& label, const std::string& name,
                        SourceRange where);

  // check_layers.cpp
  std::optional<Layer> layer(const ast::Declaration& declaration, LayerSite& site);
  void layer_entry(const ast::Entry& entry, Layer& layer);
  void layer_layout(const ast::Entry& entry, Layer& layer);

  // check_graph.cpp
  void check_graph(Spec& spec);
  void check_chain(const Spec& spec, Layer& consumer, const Layer& producer);
  void check_dtypes(const Spec& spec, const Layer& consumer, const Layer& producer);
  void check_fp8_input(const Layer& consumer, const Layer& producer);
  void check_sizes(const Layer& layer);
  void check_layout(const Layer& layer);
  void check_fp8_output(const Spec& spec, const Layer& producer);
  void check_against_target(const Layer& layer);

  const SourceFile& file_;
  Diagnostics& diagnostics_;
  ValueReader read_;
  CheckOptions options_;

  Target target_;
  SourceRange target_where_{};
  bool target_written_ = false;
  KernelBackend backend_ = KernelBackend::nvrtc;
  SourceRange backend_where_{};
  bool backend_written_ = false;

  // Top-level declarations by kind, then name.
  std::map<std::string, const ast::Declaration*> recipe_declarations_;
  std::map<std::string, const ast::Declaration*> layout_declarations_;
  std::map<std::string, const ast::Declaration*> debug_declarations_;
  std::map<std::string, const ast::Declaration*> layer_declarations_;
  std::vector<const ast::Declaration*> declaration_order_;

  // Named settings once resolved (nullopt: resolved with errors), and the
  // ones being resolved right now, to catch `recipe a = b`, `recipe b = a`.
  std::map<std::string, std::optional<Recipe>> recipes_;
  std::map<std::string, std::optional<Layout>> layouts_;
  std::map<std::string, std::optional<Debug>> debugs_;
  std::vector<std::string> resolving_;  // "recipe a", "recipe b", ...: the chain being resolved

  std::map<std::string, LayerSite> layer_sites_;
};

}  // namespace fp8c::dsl
