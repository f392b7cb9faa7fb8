#include "codegen/kernels/cuda_store.hpp"

namespace fp8c {

std::string cuda_store_functions() {
  return R"(
__device__ __forceinline__ float canonical(float v) {
  return v != v ? __uint_as_float(0x7FFFFFFFu) : v;
}
__device__ __forceinline__ u16 to_bits(float v, bf16_t) {
  u16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
  return v != v ? u16(0x7FFF) : r;
}
__device__ __forceinline__ u16 to_bits(float v, fp16_t) {
  u16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(v));
  return v != v ? u16(0x7FFF) : r;
}
// Two values in one 32-bit word, `lo` in the low half: one cvt for both.
__device__ __forceinline__ u32 pack2(float lo, float hi, bf16_t) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  if (lo != lo) r = (r & 0xFFFF0000u) | 0x7FFFu;
  if (hi != hi) r = (r & 0x0000FFFFu) | 0x7FFF0000u;
  return r;
}
__device__ __forceinline__ u32 pack2(float lo, float hi, fp16_t) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  if (lo != lo) r = (r & 0xFFFF0000u) | 0x7FFFu;
  if (hi != hi) r = (r & 0x0000FFFFu) | 0x7FFF0000u;
  return r;
}
__device__ __forceinline__ void store_element(float* p, float v) { *p = canonical(v); }
__device__ __forceinline__ void store_element(bf16_t* p, float v) { p->bits = to_bits(v, bf16_t()); }
__device__ __forceinline__ void store_element(fp16_t* p, float v) { p->bits = to_bits(v, fp16_t()); }
)";
}

}  // namespace fp8c
