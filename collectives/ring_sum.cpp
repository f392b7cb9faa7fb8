#include "collectives/ring_sum.hpp"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "collectives/narrow_float.hpp"

namespace fp8c::collectives {
namespace {

float widen(const void* base, std::size_t i, ElemType type) {
  if (type == ElemType::fp32) {
    float v;
    std::memcpy(&v, static_cast<const std::byte*>(base) + i * 4, 4);
    return v;
  }
  std::uint16_t bits;
  std::memcpy(&bits, static_cast<const std::byte*>(base) + i * 2, 2);
  return type == ElemType::bf16 ? bfloat16_to_float(bits) : float16_to_float(bits);
}

void narrow(void* base, std::size_t i, ElemType type, float v) {
  if (type == ElemType::fp32) {
    std::memcpy(static_cast<std::byte*>(base) + i * 4, &v, 4);
    return;
  }
  const std::uint16_t bits =
      type == ElemType::bf16 ? float_to_bfloat16_rne(v) : float_to_float16_rne(v);
  std::memcpy(static_cast<std::byte*>(base) + i * 2, &bits, 2);
}

void check(ElemType type) {
  if (type != ElemType::fp32 && type != ElemType::bf16 && type != ElemType::fp16)
    throw std::invalid_argument("ring sum: partials must be fp32, bf16 or fp16, not " +
                                std::string(to_string(type)));
}

}  // namespace

void ring_sum_step(const float* sum_in, const void* partial, ElemType type, float* sum_out,
                   std::size_t count) {
  check(type);
  for (std::size_t i = 0; i < count; ++i) {
    const float p = widen(partial, i, type);
    sum_out[i] = sum_in ? sum_in[i] + p : p;
  }
}

void ring_sum_last(const float* sum_in, const void* partial, ElemType type, void* out,
                   std::size_t count) {
  check(type);
  for (std::size_t i = 0; i < count; ++i) narrow(out, i, type, sum_in[i] + widen(partial, i, type));
}

}  // namespace fp8c::collectives
