#include "dsl/checker.hpp"

#include <algorithm>

#include "dsl/parser.hpp"

namespace fp8c::dsl {

SourceRange LayerSite::value_or_name(const std::string& key) const {
  const auto it = entries.find(key);
  return it == entries.end() ? name() : span_of(it->second->value);
}

SourceRange LayerSite::key_or_name(const std::string& key) const {
  const auto it = entries.find(key);
  return it == entries.end() ? name() : it->second->key.where;
}

Checker::Checker(const SourceFile& file, Diagnostics& diagnostics, const CheckOptions& options)
    : file_(file), diagnostics_(diagnostics), read_(diagnostics), options_(options) {}

namespace {

const std::vector<std::string_view> kDeclarationKinds = {"recipe", "layout", "layer",
                                                         "debug",  "target", "backend"};

bool reserved_recipe_word(const std::string& name) {
  for (const auto& [word, kind] : names<RecipeKind>())
    if (word == name) return true;
  return false;
}

bool reserved_layout_word(const std::string& name) {
  for (const auto& [word, mode] : names<ParallelMode>())
    if (word == name) return true;
  return false;
}

}  // namespace

void Checker::collect(const ast::File& file) {
  for (const auto& declaration : file.declarations) {
    const std::string& kind = declaration.kind.text;
    if (std::find(kDeclarationKinds.begin(), kDeclarationKinds.end(), kind) ==
        kDeclarationKinds.end()) {
      diagnostics_.error(
          declaration.kind.where,
          "unknown declaration " + quoted(kind) + did_you_mean(kind, kDeclarationKinds) +
              " (a file declares recipes, layouts, layers, debug blocks, a target and a backend)");
      continue;
    }
    if (kind == "target" || kind == "backend") {
      const bool target = kind == "target";
      if (declaration.has_name) {
        diagnostics_.error(declaration.name.where,
                           "'" + kind + "' takes no name: write `" +
                               (target ? "target = sm_90a" : "backend = llvm") + "`");
        continue;
      }
      bool& written = target ? target_written_ : backend_written_;
      SourceRange& where = target ? target_where_ : backend_where_;
      if (written) {
        diagnostics_.error(declaration.kind.where, "the " + kind + " is set twice");
        diagnostics_.note(where, "first set here");
        continue;
      }
      written = true;
      where = span_of(declaration.value);
      declaration_order_.push_back(&declaration);
      continue;
    }
    if (!declaration.has_name) {
      diagnostics_.error(declaration.kind.where,
                         "a " + kind + " needs a name: `" + kind + " NAME = ...`");
      continue;
    }
    std::map<std::string, const ast::Declaration*>* table = &layer_declarations_;
    if (kind == "recipe") table = &recipe_declarations_;
    if (kind == "layout") table = &layout_declarations_;
    if (kind == "debug") table = &debug_declarations_;
    const std::string& name = declaration.name.text;
    if (kind == "recipe" && reserved_recipe_word(name)) {
      diagnostics_.error(declaration.name.where,
                         "'" + name + "' is a recipe kind; give the recipe another name");
      continue;
    }
    if (kind == "layout" && reserved_layout_word(name)) {
      diagnostics_.error(declaration.name.where,
                         "'" + name + "' is a parallel mode; give the layout another name");
      continue;
    }
    if (auto [it, inserted] = table->emplace(name, &declaration); !inserted) {
      diagnostics_.error(declaration.name.where, "there is already a " + kind + " named '" + name + "'");
      diagnostics_.note(it->second->name.where, "the first '" + name + "' is here");
      continue;
    }
    declaration_order_.push_back(&declaration);
  }
  // An empty file (or one of comments, or of settings only) is most likely
  // the wrong file or a truncated one; there is nothing to compile in it.
  const bool has_layer = std::any_of(file.declarations.begin(), file.declarations.end(),
                                     [](const auto& d) { return d.kind.text == "layer"; });
  if (!has_layer && !diagnostics_.has_errors())
    diagnostics_.error({0, 0},
                       "the file declares no layers: a spec needs at least one "
                       "`layer NAME = linear { ... }`");
}

void Checker::check_target() {
  target_ = options_.target.value_or(Target{});
  if (!target_written_ || options_.target) return;
  const ast::Declaration* declaration = nullptr;
  for (const auto* d : declaration_order_)
    if (d->kind.text == "target") declaration = d;
  ast::Entry entry{declaration->kind, declaration->value, declaration->where};
  const ast::Atom* atom = read_.single(entry);
  if (!atom || !read_.expect_word(*atom, "a GPU architecture such as sm_90a")) return;
  if (auto target = parse_target(atom->text)) {
    target_ = *target;
    return;
  }
  std::vector<std::string> known;
  for (const auto& t : known_targets()) known.push_back(t.str());
  read_.unknown_word(*atom, "target", {known.begin(), known.end()});
}

// `backend = nvrtc | llvm`: which compiler builds the generated kernels.
// Whether this build has the LLVM backend is not the checker's business
// (the spec is the same on every machine); compiling says so.
void Checker::check_backend() {
  backend_ = options_.backend.value_or(KernelBackend::nvrtc);
  if (!backend_written_ || options_.backend) return;
  const ast::Declaration* declaration = nullptr;
  for (const auto* d : declaration_order_)
    if (d->kind.text == "backend") declaration = d;
  ast::Entry entry{declaration->kind, declaration->value, declaration->where};
  const ast::Atom* atom = read_.single(entry);
  if (!atom) return;
  if (auto v = read_.word<KernelBackend>(*atom, "kernel backend")) backend_ = *v;
}

std::optional<Spec> Checker::check(const ast::File& file) {
  collect(file);
  check_target();
  check_backend();
  resolve_named_settings();

  Spec spec;
  spec.target = target_;
  spec.backend = backend_;
  for (const auto* declaration : declaration_order_) {
    const std::string& kind = declaration->kind.text;
    const std::string& name = declaration->name.text;
    if (kind == "recipe" && recipes_[name]) spec.recipes.push_back(*recipes_[name]);
    if (kind == "layout" && layouts_[name]) spec.layouts.push_back(*layouts_[name]);
    if (kind == "debug" && debugs_[name]) spec.debugs.push_back(*debugs_[name]);
    if (kind == "layer") {
      LayerSite& site = layer_sites_[name];
      site.declaration = declaration;
      if (auto checked = layer(*declaration, site)) spec.layers.push_back(std::move(*checked));
    }
  }
  if (diagnostics_.has_errors()) return std::nullopt;
  check_graph(spec);
  if (diagnostics_.has_errors()) return std::nullopt;
  return spec;
}

}  // namespace fp8c::dsl

namespace fp8c {

CheckResult check_source(const SourceFile& file, const CheckOptions& options) {
  CheckResult result;
  const ast::File syntax = dsl::parse_file(file, result.diagnostics);
  if (result.diagnostics.has_errors()) return result;
  dsl::Checker checker(file, result.diagnostics, options);
  result.spec = checker.check(syntax);
  return result;
}

Spec load_spec(const std::string& path, const CheckOptions& options) {
  const SourceFile file = read_source_file(path);
  CheckResult result = check_source(file, options);
  if (!result.spec) throw SpecError(result.diagnostics.render(file));
  return std::move(*result.spec);
}

}  // namespace fp8c::dsl
