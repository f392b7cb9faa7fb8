// The one element-type enum of fp8c: what a spec's `dtype` and `forward` /
// `backward` words name (spec.hpp's DType and Fp8Format are aliases of it),
// the type of every plan tensor, kernel operand and numerics function, and the
// element type of every collective. It sits at the bottom of the dependency
// graph (no other fp8c header) and is header-only, so collectives/ and the
// constexpr numerics can take it too. Other type systems (NCCL's
// ncclDataType_t, DLPack's type codes, cuBLASLt's cudaDataType_t) are
// converted to and from it only where fp8c calls those libraries.
//
// A function that accepts only some values (an FP8 format, a layer dtype)
// says so and checks with require_fp8 / require_high_precision, which throw
// std::invalid_argument naming the value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace fp8c {

enum class ElemType : std::uint8_t {
  bf16,
  fp16,
  fp32,
  e4m3,  // OCP FP8 E4M3 (no Inf), the forward format of Hopper's tensor cores
  e5m2,  // OCP FP8 E5M2, the usual backward (gradient) format
  e8m0,  // an MXFP8 block scale: a biased power-of-two exponent, one byte
  fp64,
  i32,
  u8,
};

// "bf16", "fp16", "fp32", "e4m3", "e5m2", "e8m0", "fp64", "i32", "u8": the
// words of the .fp8 language for the values it has, and what plans, JSON,
// kernel descriptions and error messages print. "?" for a value outside the
// enum.
constexpr std::string_view to_string(ElemType t) {
  switch (t) {
    case ElemType::bf16:
      return "bf16";
    case ElemType::fp16:
      return "fp16";
    case ElemType::fp32:
      return "fp32";
    case ElemType::e4m3:
      return "e4m3";
    case ElemType::e5m2:
      return "e5m2";
    case ElemType::e8m0:
      return "e8m0";
    case ElemType::fp64:
      return "fp64";
    case ElemType::i32:
      return "i32";
    case ElemType::u8:
      return "u8";
  }
  return "?";
}

// Bytes per element; 0 for a value outside the enum.
constexpr std::size_t element_bytes(ElemType t) {
  switch (t) {
    case ElemType::fp64:
      return 8;
    case ElemType::fp32:
    case ElemType::i32:
      return 4;
    case ElemType::bf16:
    case ElemType::fp16:
      return 2;
    case ElemType::e4m3:
    case ElemType::e5m2:
    case ElemType::e8m0:
    case ElemType::u8:
      return 1;
  }
  return 0;
}

// The two FP8 data formats (E8M0 is a scale encoding, not FP8 data).
constexpr bool is_fp8(ElemType t) {
  return t == ElemType::e4m3 || t == ElemType::e5m2;
}

// The types a layer takes in and hands out (a spec's `dtype`): bf16, fp16,
// fp32. Not fp64, which only references and collectives use.
constexpr bool is_high_precision(ElemType t) {
  return t == ElemType::bf16 || t == ElemType::fp16 || t == ElemType::fp32;
}

// Whether an integer is one of the enumerators (guards casts from integers
// received over the wire).
constexpr bool is_valid_elem_type(std::uint8_t value) {
  return value <= static_cast<std::uint8_t>(ElemType::u8);
}

// `t` if it is e4m3 or e5m2; else throws std::invalid_argument
// "WHAT: TYPE is not an FP8 format (e4m3 or e5m2)".
inline ElemType require_fp8(ElemType t, std::string_view what) {
  if (!is_fp8(t))
    throw std::invalid_argument(std::string(what) + ": " + std::string(to_string(t)) +
                                " is not an FP8 format (e4m3 or e5m2)");
  return t;
}

// `t` if it is bf16, fp16 or fp32; else throws std::invalid_argument
// "WHAT: TYPE is not a high-precision type (bf16, fp16 or fp32)".
inline ElemType require_high_precision(ElemType t, std::string_view what) {
  if (!is_high_precision(t))
    throw std::invalid_argument(std::string(what) + ": " + std::string(to_string(t)) +
                                " is not a high-precision type (bf16, fp16 or fp32)");
  return t;
}

}  // namespace fp8c
