// What every CPU reference reads its inputs with: one high-precision element
// of a raw buffer (bf16/fp16 bits or fp32) as a float, exactly.
#pragma once

#include <cstdint>
#include <cstring>

#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "codegen/plan/plan.hpp"

namespace fp8c::runtime {

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
