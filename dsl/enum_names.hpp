// The words of the language for each enum: one table per type, read by the
// checker (word -> value, with "did you mean"), by `to_string`, and by the
// printers. Adding a value to an enum means adding its word here, nowhere else.
#pragma once

#include <span>
#include <string_view>
#include <utility>

#include "fp8c/spec.hpp"

namespace fp8c::dsl {

template <typename E>
using NameTable = std::span<const std::pair<std::string_view, E>>;

template <typename E>
NameTable<E> names();

#define FP8C_NAMES(Type, ...)                                                \
  template <>                                                                \
  inline NameTable<Type> names<Type>() {                                     \
    static constexpr std::pair<std::string_view, Type> table[] = {__VA_ARGS__}; \
    return table;                                                            \
  }

FP8C_NAMES(Fp8Format, {"e4m3", Fp8Format::e4m3}, {"e5m2", Fp8Format::e5m2})
FP8C_NAMES(DType, {"bf16", DType::bf16}, {"fp16", DType::fp16}, {"fp32", DType::fp32})
FP8C_NAMES(RecipeKind, {"none", RecipeKind::none}, {"delayed", RecipeKind::delayed},
           {"current", RecipeKind::current}, {"blockwise", RecipeKind::blockwise},
           {"mxfp8", RecipeKind::mxfp8})
FP8C_NAMES(AmaxAlgo, {"max", AmaxAlgo::max}, {"most_recent", AmaxAlgo::most_recent})
FP8C_NAMES(ScaleForm, {"fp32", ScaleForm::fp32}, {"pow2", ScaleForm::pow2})
FP8C_NAMES(NanPolicy, {"propagate", NanPolicy::propagate}, {"error", NanPolicy::error})
FP8C_NAMES(Overlap, {"none", Overlap::none}, {"bulk", Overlap::bulk}, {"ring", Overlap::ring})
FP8C_NAMES(ParallelMode, {"column", ParallelMode::column}, {"row", ParallelMode::row})
FP8C_NAMES(Activation, {"none", Activation::none}, {"relu", Activation::relu},
           {"gelu", Activation::gelu}, {"silu", Activation::silu})
FP8C_NAMES(SaveInput, {"fp8", SaveInput::fp8}, {"original", SaveInput::original})
FP8C_NAMES(GemmBackend, {"cublaslt", GemmBackend::cublaslt}, {"generated", GemmBackend::generated})
FP8C_NAMES(GemmKind, {"fprop", GemmKind::fprop}, {"dgrad", GemmKind::dgrad},
           {"wgrad", GemmKind::wgrad})

#undef FP8C_NAMES

// Targets a spec may name. FP8 tensor cores start at sm_89 (Ada); the `a`
// variants enable Hopper's and Blackwell's arch-specific instructions.
inline std::span<const Target> known_targets() {
  static const Target table[] = {{80, false},  {86, false},  {89, false}, {90, false},
                                 {90, true},   {100, false}, {100, true}, {120, false},
                                 {120, true}};
  return table;
}

}  // namespace fp8c::dsl
