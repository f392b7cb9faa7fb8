// `fp8c explain`: a checked Spec printed back as .fp8 text, every default
// written out and every reference resolved in place, with the derived facts
// (per-rank sizes, where a recipe or layout came from) as comments. The output
// is itself a valid spec that checks to an equal Spec.

#include <sstream>

#include "fp8c/dsl.hpp"

namespace fp8c {
namespace {

std::string b(bool v) { return v ? "true" : "false"; }

void recipe_block(std::ostringstream& out, const Recipe& r, const std::string& indent) {
  out << to_string(r.kind);
  if (r.kind == RecipeKind::none) return;
  out << " {\n";
  out << indent << "  forward  = " << to_string(r.forward) << "\n";
  out << indent << "  backward = " << to_string(r.backward) << "\n";
  if (r.kind == RecipeKind::delayed) {
    out << indent << "  history  = " << r.history << "\n";
    out << indent << "  amax     = " << to_string(r.amax) << "\n";
    out << indent << "  margin   = " << r.margin << "\n";
  }
  if (r.kind == RecipeKind::current || r.kind == RecipeKind::blockwise)
    out << indent << "  scale    = " << to_string(r.scale) << "\n";
  out << indent << "  nan      = " << to_string(r.nan) << "\n";
  out << indent << "}";
}

void layout_block(std::ostringstream& out, const Layout& l, const std::string& indent) {
  out << "{\n";
  out << indent << "  tensor_parallel   = " << l.tensor_parallel << "\n";
  out << indent << "  sequence_parallel = " << b(l.sequence_parallel) << "\n";
  out << indent << "  overlap           = " << to_string(l.overlap) << "\n";
  out << indent << "}";
}

void debug_block(std::ostringstream& out, const Debug& d, const std::string& indent) {
  out << "{\n";
  out << indent << "  stats    = " << b(d.stats) << "\n";
  out << indent << "  fallback =";
  if (d.fallback.empty()) out << " none";
  for (auto g : d.fallback) out << " " << to_string(g);
  out << "\n" << indent << "}";
}

}  // namespace

std::string explain_spec(const Spec& spec) {
  std::ostringstream out;
  out << "# fp8c explain: every setting resolved, every default written out.\n";
  out << "target = " << spec.target.str() << "\n";
  out << "backend = " << to_string(spec.backend) << "\n";
  for (const auto& r : spec.recipes) {
    out << "\nrecipe " << r.name << " = ";
    recipe_block(out, r, "");
    out << "\n";
  }
  for (const auto& l : spec.layouts) {
    out << "\nlayout " << l.name << " = ";
    layout_block(out, l, "");
    out << "\n";
  }
  for (const auto& d : spec.debugs) {
    out << "\ndebug " << d.name << " = ";
    debug_block(out, d, "");
    out << "\n";
  }
  for (const auto& layer : spec.layers) {
    out << "\nlayer " << layer.name << " = linear {\n";
    out << "  # weight per rank: " << layer.out_per_rank() << " x " << layer.in_per_rank() << "\n";
    if (!layer.input.empty()) out << "  input      = " << layer.input << "\n";
    out << "  in         = " << layer.in << "\n";
    out << "  out        = " << layer.out << "\n";
    out << "  bias       = " << b(layer.bias) << "\n";
    out << "  activation = " << to_string(layer.activation) << "\n";
    out << "  dtype      = " << to_string(layer.dtype) << "\n";
    out << "  output     = " << (layer.output_fp8 ? "fp8" : to_string(layer.output_dtype)) << "\n";
    out << "  save_input = " << to_string(layer.save_input) << "\n";
    out << "  gemm       = " << to_string(layer.gemm) << "\n";
    out << "  weight_cache = " << b(layer.weight_cache) << "\n";
    // Named settings are printed in full above; a layer names them.
    out << "  recipe     = ";
    if (layer.recipe.name.empty())
      recipe_block(out, layer.recipe, "  ");
    else
      out << layer.recipe.name;
    out << "\n  layout     = ";
    if (layer.layout.name.empty())
      layout_block(out, layer.layout, "  ");
    else
      out << layer.layout.name;
    out << " " << to_string(layer.mode) << "\n";
    out << "  debug      = ";
    if (layer.debug.name.empty())
      debug_block(out, layer.debug, "  ");
    else
      out << layer.debug.name;
    out << "\n}\n";
  }
  return out.str();
}

}  // namespace fp8c
