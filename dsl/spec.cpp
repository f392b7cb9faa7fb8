#include "fp8c/spec.hpp"

#include "dsl/enum_names.hpp"

namespace fp8c {

std::string Target::str() const {
  return "sm_" + std::to_string(sm) + (arch_specific ? "a" : "");
}

std::optional<Target> parse_target(std::string_view text) {
  for (const auto& known : dsl::known_targets())
    if (known.str() == text) return known;
  return std::nullopt;
}

const Layer* Spec::find_layer(std::string_view name) const {
  for (const auto& layer : layers)
    if (layer.name == name) return &layer;
  return nullptr;
}

Recipe default_recipe(RecipeKind kind) {
  Recipe recipe;
  recipe.kind = kind;
  if (kind == RecipeKind::blockwise || kind == RecipeKind::mxfp8) recipe.backward = Fp8Format::e4m3;
  if (kind == RecipeKind::blockwise) recipe.scale = ScaleForm::pow2;
  return recipe;
}

const Layer* fp8_output_consumer(const Spec& spec, const Layer& producer) {
  if (!producer.output_fp8 || !producer.recipe.is_fp8()) return nullptr;
  const Layer* consumer = nullptr;
  for (const auto& layer : spec.layers) {
    if (layer.input != producer.name) continue;
    if (consumer) return nullptr;  // one FP8 tensor carries one consumer's input scale
    consumer = &layer;
  }
  if (!consumer || consumer->recipe.kind != RecipeKind::delayed) return nullptr;
  return consumer;
}

namespace {

// 'a', 'a' and 'b', 'a', 'b' and 'c'
std::string quoted_list(const std::vector<std::string>& names) {
  std::string list;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) list += i + 1 == names.size() ? " and " : ", ";
    list += "'" + names[i] + "'";
  }
  return list;
}

}  // namespace

std::string fp8_output_not_honoured(const Spec& spec, const Layer& producer) {
  if (!producer.output_fp8 || !producer.recipe.is_fp8()) return "";
  if (fp8_output_consumer(spec, producer)) return "";
  std::vector<std::string> consumers;
  const Layer* only = nullptr;
  for (const auto& layer : spec.layers)
    if (layer.input == producer.name) {
      consumers.push_back(layer.name);
      only = &layer;
    }
  if (consumers.empty())
    return "no layer consumes it (FP8 output is for a consumer with recipe delayed)";
  if (consumers.size() > 1)
    return "layers " + quoted_list(consumers) + (consumers.size() == 2 ? " both" : " all") +
           " consume it, and one FP8 tensor carries the input scale of one consumer";
  const RecipeKind kind = only->recipe.kind;
  return "consumer '" + only->name + "' uses recipe " + std::string(to_string(kind)) +
         (kind == RecipeKind::none ? ", which takes no FP8 input"
          : kind == RecipeKind::current
              ? ", whose input scale comes from the tensor's own amax, which is not known "
                "before this GEMM runs"
              : ", whose block scales are computed from the data, which does not exist "
                "before this GEMM runs");
}

#define FP8C_TO_STRING(Type)                         \
  std::string_view to_string(Type value) {           \
    for (const auto& [name, v] : dsl::names<Type>()) \
      if (v == value) return name;                   \
    return "?";                                      \
  }

FP8C_TO_STRING(RecipeKind)
FP8C_TO_STRING(AmaxAlgo)
FP8C_TO_STRING(ScaleForm)
FP8C_TO_STRING(NanPolicy)
FP8C_TO_STRING(Overlap)
FP8C_TO_STRING(ParallelMode)
FP8C_TO_STRING(Activation)
FP8C_TO_STRING(SaveInput)
FP8C_TO_STRING(GemmBackend)
FP8C_TO_STRING(KernelBackend)
FP8C_TO_STRING(GemmKind)

#undef FP8C_TO_STRING

}  // namespace fp8c
