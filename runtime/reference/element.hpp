// What every CPU reference reads its inputs with: one high-precision element
// of a raw buffer (bf16/fp16 bits or fp32) as a float, exactly; and the
// Spec's FP8 format as codegen/numerics names it.
#pragma once

#include <cstdint>
#include <cstring>

#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "codegen/plan/plan.hpp"

namespace fp8c::runtime {

constexpr numerics::Fp8Format numerics_format(Fp8Format f) {
  return f == Fp8Format::e4m3 ? numerics::Fp8Format::e4m3 : numerics::Fp8Format::e5m2;
}

inline float load_element(ElemType type, const void* data, std::int64_t i) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (type == ElemType::fp32) {
    float f;
    std::memcpy(&f, bytes + 4 * i, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, bytes + 2 * i, 2);
  return type == ElemType::bf16 ? numerics::bf16_to_float(h) : numerics::fp16_to_float(h);
}

}  // namespace fp8c::runtime
