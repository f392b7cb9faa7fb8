// The CUDA C++ printer for ScaleUpdateKernel.
//
// Block k owns tensor k. The history moves one slot down in chunks of 256,
// the last chunk first: a chunk reads its old values, waits, then writes
// them one slot on, which only overwrites the first slot of the chunk after
// it, already read. The amax over the new window is a max of |x| bits
// (NaN sorts above Inf, so it wins), reduced across the block. Thread 0
// then does the scalar part. The constant fp8_max * 2^-margin is computed
// here on the host with the CPU numerics' own ldexp and printed as bits, so
// both sides divide the same float.

#include <bit>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "codegen/kernels/cuda_prelude.hpp"
#include "codegen/kernels/scale_update.hpp"
#include "codegen/numerics/fp8.hpp"

namespace fp8c {
namespace {

std::string hex_bits(float x) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%08Xu", std::bit_cast<std::uint32_t>(x));
  return buffer;
}

}  // namespace

std::string ScaleUpdateKernel::name() const {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on
  // "literal" + std::string temporaries here.
  std::string n = "scale_update_";
  (n += std::to_string(formats.size())) += "_h";
  (n += std::to_string(history_length)) += "_m";
  if (margin < 0) n += "n";
  n += std::to_string(margin < 0 ? -margin : margin);
  n += rule == AmaxAlgo::max ? "_max_" : "_recent_";
  for (ElemType f : formats) n += f == ElemType::e4m3 ? '4' : '5';
  if (scale_stride != 1) (n += "_s") += std::to_string(scale_stride);
  if (guard > 0) (n += "_g") += std::to_string(guard);
  return n;
}

KernelSource emit_cuda(const ScaleUpdateKernel& k) {
  if (k.formats.empty()) throw std::invalid_argument("scale update: no tensors");
  if (k.history_length == 0) throw std::invalid_argument("scale update: empty history");
  if (k.margin < -100 || k.margin > 100)
    throw std::invalid_argument("scale update: |margin| must be at most 100");
  if (k.scale_stride < 1) throw std::invalid_argument("scale update: scale_stride below 1");
  if (k.guard < 0) throw std::invalid_argument("scale update: negative guard");
  for (ElemType f : k.formats) require_fp8(f, "scale update format");
  std::string s = cuda_prelude();
  s += "#define HISTORY " + std::to_string(k.history_length) + "\n";
  s += "#define SCALE_STRIDE " + std::to_string(k.scale_stride) + "\n";
  s += "#define RULE_MAX " + std::string(k.rule == AmaxAlgo::max ? "true" : "false") + "\n";
  s += "#define GUARD " + std::to_string(k.guard) + "\n";
  s += "// fp8_max * 2^-margin per tensor, as float bits\n";
  s += "__device__ const u32 kScaledMaxBits[" + std::to_string(k.formats.size()) + "] = {";
  for (std::size_t i = 0; i < k.formats.size(); ++i)
    s += (i ? ", " : "") + hex_bits(std::ldexp(numerics::fp8_max(k.formats[i]), -k.margin));
  s += "};\n";
  s += R"(
// IEEE round-to-nearest division without flushing subnormals, immune to
// -use_fast_math, -prec-div and -ftz.
__device__ __forceinline__ float div_rn(float a, float b) {
  float q;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(q) : "f"(a), "f"(b));
  return q;
}

extern "C" __global__ void __launch_bounds__(256)
)";
  s += k.name();
  s += R"((float* __restrict__ history, const float* __restrict__ amax_in,
     const float* previous_scale, float* scale_out, float* __restrict__ scale_inv_out
#if GUARD > 0
     , const float* __restrict__ guard
#endif
     ) {
  const int tensor = blockIdx.x, t = threadIdx.x;
#if GUARD > 0
  // The NaN verdict: every block reads the same floats and returns before
  // its first write (and before any barrier) if one is NaN.
  for (int i = 0; i < GUARD; ++i)
    if ((__float_as_uint(guard[i]) & 0x7FFFFFFFu) > 0x7F800000u) return;
#endif
  float* h = history + (long long)tensor * HISTORY;
  const float newest = amax_in[tensor];
  u32 amax_bits = 0;
  for (int base = (HISTORY - 1) / 256 * 256; base >= 0; base -= 256) {
    const int i = base + t;
    const float old = i < HISTORY ? h[i] : 0.0f;
    __syncthreads();
    if (i + 1 < HISTORY) {
      h[i + 1] = old;
      amax_bits = max(amax_bits, abs_bits(old));
    }
    __syncthreads();
  }
  if (t == 0) {
    h[0] = newest;
    amax_bits = max(amax_bits, abs_bits(newest));
  }
#if RULE_MAX
  __shared__ u32 reduce32[32];
  amax_bits = block_max_u32(amax_bits, reduce32);
  const float amax = __uint_as_float(amax_bits);
#else
  const float amax = newest;  // as is: a negative one keeps the previous scale
#endif
  if (t != 0) return;
  const float previous = previous_scale[tensor * SCALE_STRIDE];
  float scale = previous;
  // Positive, finite and nonzero, tested on the bits so that a subnormal amax
  // counts even under -ftz (it gives a huge scale, as on the CPU).
  const u32 bits = __float_as_uint(amax);
  if (bits != 0u && bits < 0x7F800000u) {
    scale = div_rn(__uint_as_float(kScaledMaxBits[tensor]), amax);
    if (scale == __int_as_float(0x7F800000)) scale = __int_as_float(0x7F7FFFFF);
  }
  scale_out[tensor * SCALE_STRIDE] = scale;
  scale_inv_out[tensor * SCALE_STRIDE] = div_rn(1.0f, scale);
}
)";
  return {k.name(), k.name(), std::move(s), {}};
}

}  // namespace fp8c
