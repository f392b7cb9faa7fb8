// The words of the language for each enum: one table per type, read by the
// checker (word -> value, with "did you mean"), by `to_string`, and by the
// printers. Adding a value to an enum means adding its word here, nowhere else
// (ElemType's words are its to_string, elem_type.hpp; the tables here say
// which of them each key accepts).
#pragma once

#include <span>
#include <string_view>
#include <utility>

#include "fp8c/spec.hpp"

namespace fp8c::dsl {

template <typename E>
using NameTable = std::span<const std::pair<std::string_view, E>>;

// The language has two vocabularies over the one ElemType: `dtype = bf16`
// and `forward = e4m3` each accept only their own words. A table is keyed by
// its vocabulary: the enum itself, or one of these tags for ElemType.
struct DTypeWords {};
struct Fp8FormatWords {};

template <typename Vocabulary>
struct VocabularyValue {
  using type = Vocabulary;
};
template <>
struct VocabularyValue<DTypeWords> {
  using type = ElemType;
};
template <>
struct VocabularyValue<Fp8FormatWords> {
  using type = ElemType;
};
// The type of a vocabulary's values.
template <typename Vocabulary>
using ValueOf = typename VocabularyValue<Vocabulary>::type;

template <typename Vocabulary>
NameTable<ValueOf<Vocabulary>> names();

#define FP8C_NAMES(Vocabulary, ...)                                                            \
  template <>                                                                                  \
  inline NameTable<ValueOf<Vocabulary>> names<Vocabulary>() {                                  \
    static constexpr std::pair<std::string_view, ValueOf<Vocabulary>> table[] = {__VA_ARGS__}; \
    return table;                                                                              \
  }

// The words are to_string(ElemType)'s.
FP8C_NAMES(Fp8FormatWords, {"e4m3", ElemType::e4m3}, {"e5m2", ElemType::e5m2})
FP8C_NAMES(DTypeWords, {"bf16", ElemType::bf16}, {"fp16", ElemType::fp16}, {"fp32", ElemType::fp32})
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
FP8C_NAMES(GemmBackend, {"auto", GemmBackend::automatic}, {"cublaslt", GemmBackend::cublaslt},
           {"generated", GemmBackend::generated})
FP8C_NAMES(KernelBackend, {"nvrtc", KernelBackend::nvrtc}, {"llvm", KernelBackend::llvm})
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
