// How the epilogue and dequantize kernels store an fp32 value as a
// high-precision element (codegen/kernels/cuda_store.hpp): rounded to
// nearest even with codegen/numerics' conversions, the way runtime/cpu's
// TensorStore::write_hp rounds, except that a NaN stored to fp32 is always
// the canonical 0x7FFFFFFF (write_hp keeps whatever payload the CPU's
// arithmetic produced; the GPU's may differ, so the kernels canonicalise).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "codegen/numerics/half.hpp"
#include "codegen/plan/plan.hpp"

namespace fp8c::runtime {

inline float canonical_nan(float v) {
  return v != v ? std::bit_cast<float>(0x7FFFFFFFu) : v;
}

// Writes element i of a raw bf16 / fp16 / fp32 buffer.
inline void store_element(ElemType type, void* data, std::int64_t i, float v) {
  auto* bytes = static_cast<unsigned char*>(data);
  if (type == ElemType::fp32) {
    const float c = canonical_nan(v);
    std::memcpy(bytes + 4 * i, &c, 4);
    return;
  }
  const std::uint16_t h =
      type == ElemType::bf16 ? numerics::float_to_bf16(v) : numerics::float_to_fp16(v);
  std::memcpy(bytes + 2 * i, &h, 2);
}

}  // namespace fp8c::runtime
