// The CUDA C++ printer for DequantizeKernel.
//
// One block of 256 threads owns a 64 (outer) x 128 (inner) tile. A thread
// takes four adjacent inner elements (one 32-bit word of FP8 codes) in eight
// rows, 8 apart; a warp reads 32 contiguous bytes in each of four rows. Each
// thread works out its four elements' segment, data offset and scale column
// once (divisions by runtime extents), so a row costs a load, a multiply and
// a store per element. Codes are decoded with cvt.rn.f16x2.{e4m3x2,e5m2x2},
// exact, then widened to fp32.
//   - Rowwise data: the four results leave as one 8-byte (fp32: 16-byte)
//     store when the shape and pointers allow, else element by element.
//   - Columnwise data (transpose): the tile is staged in shared memory as
//     floats, [128 inner][64 outer + 1] (the pad, and the lane-to-element map,
//     keep the stores conflict-free), then each warp writes whole output rows,
//     two elements per lane.
// Word loads need inner % 4 == 0, segment % 4 == 0 and 4-byte aligned data;
// otherwise each code is loaded on its own.

#include <sstream>
#include <stdexcept>

#include "codegen/kernels/cuda_prelude.hpp"
#include "codegen/kernels/cuda_store.hpp"
#include "codegen/kernels/dequantize.hpp"

namespace fp8c {
std::string DequantizeKernel::name() const {
  std::string n = "dequantize_" + std::string(to_string(format)) + "_" + scaling_tag(scaling) +
                  "_to_" + std::string(to_string(output));
  if (transpose) n += "_t";
  if (amax) n += "_amax";
  return n;
}

KernelSource emit_cuda(const DequantizeKernel& k) {
  require_fp8(k.format, "dequantize kernel format");
  if (k.scaling != Scaling::per_tensor && k.scaling != Scaling::block_1x128 &&
      k.scaling != Scaling::block_128x128 && k.scaling != Scaling::mx_1x32)
    throw std::invalid_argument("dequantize: not an FP8 scaling: " +
                                std::string(to_string(k.scaling)));
  const std::string out = cuda_storage_type(k.output);  // throws for a non-high-precision type
  const int block_inner = k.scaling == Scaling::mx_1x32 ? 32 : 128;
  std::ostringstream s;
  s << cuda_prelude() << cuda_store_functions();
  s << "typedef " << out << " out_t;\n"
    << "#define TRANSPOSE " << cuda_bool(k.transpose) << "\n"
    << "#define AMAX " << cuda_bool(k.amax) << "\n"
    << "#define PER_TENSOR " << cuda_bool(k.scaling == Scaling::per_tensor) << "\n"
    << "#define MX " << cuda_bool(k.scaling == Scaling::mx_1x32) << "\n"
    << "#define BLOCK_OUTER " << (k.scaling == Scaling::block_128x128 ? 128 : 1) << "\n"
    << "#define BLOCK_INNER " << block_inner << "\n"
    << "#define WIDE_OUT " << cuda_bool(k.output == ElemType::fp32) << "\n"
    << "#define CVT_X2 \"cvt.rn.f16x2." << (k.format == ElemType::e4m3 ? "e4m3x2" : "e5m2x2")
    << " %0, %1;\"\n";
  s << R"(
// Two FP8 codes (low byte first) as floats, exactly: every FP8 value is an
// fp16 value. NaN codes give a NaN that the multiply below canonicalises.
__device__ __forceinline__ void decode2(u16 codes, float& lo, float& hi) {
  u32 h;
  asm(CVT_X2 : "=r"(h) : "h"(codes));
  unpack2(h, fp16_t(), lo, hi);
}

// numerics::scale_inverse: one correctly rounded division.
__device__ __forceinline__ float reciprocal_rn(float s) {
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(1.0f), "f"(s));
  return r;
}

// numerics::e8m0_to_float: 2^(code - 127); code 0 is the subnormal 2^-127.
__device__ __forceinline__ float e8m0_value(u32 code) {
  if (code == 0xFFu) return __uint_as_float(0x7FFFFFFFu);
  if (code == 0u) return __uint_as_float(0x00400000u);
  return __uint_as_float(code << 23);
}

__device__ __forceinline__ void store4(float* p, const float v[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
template <typename T>
__device__ __forceinline__ void store4(T* p, const float v[4]) {
  *reinterpret_cast<uint2*>(p) = make_uint2(pack2(v[0], v[1], T()), pack2(v[2], v[3], T()));
}
__device__ __forceinline__ void store2(float* p, float lo, float hi) {
  *reinterpret_cast<float2*>(p) = make_float2(lo, hi);
}
template <typename T>
__device__ __forceinline__ void store2(T* p, float lo, float hi) {
  *reinterpret_cast<u32*>(p) = pack2(lo, hi, T());
}

__device__ __forceinline__ bool aligned(const void* p, unsigned bytes) {
  return (reinterpret_cast<unsigned long long>(p) & (bytes - 1)) == 0;
}

// At least four blocks per SM: without the minimum, ptxas sizes registers for
// the six blocks the staged tile's shared memory would allow, and spills.
extern "C" __global__ void __launch_bounds__(256, 4)
)" << k.name()
    << R"((const u8* __restrict__ data, const float* __restrict__ tensor_scale,
     const void* __restrict__ block_scales, out_t* __restrict__ out, u32* __restrict__ amax_out,
     int outer, int inner, int segments, int segmented) {
#if TRANSPOSE
  __shared__ float tile[128 * 65];  // [inner][outer], padded
#endif
#if AMAX
  __shared__ u32 reduce32[32];
#endif
  const int t = threadIdx.x, warp = t >> 5, lane = t & 31;
  const int g = (warp & 3) * 8 + (lane & 7);      // which four inner elements
  const int row = (warp >> 2) * 4 + (lane >> 3);  // first of the thread's rows
  const int o0 = blockIdx.x * 64, n0 = blockIdx.y * 128;
  const int seg_len = inner / segments;  // the launcher checks it divides
  const long long row_stride = segmented ? seg_len : inner;
#if !PER_TENSOR
  const int seg_blocks = (seg_len + BLOCK_INNER - 1) / BLOCK_INNER;
  const long long scale_row_stride = segmented ? seg_blocks : (long long)segments * seg_blocks;
  const long long scale_rows = (outer + BLOCK_OUTER - 1) / BLOCK_OUTER;
#endif
  // Where each of the four elements lives: its column's data offset (plus
  // row * row_stride) and scale offset (plus block row * scale_row_stride).
  long long data_col[4];
#if !PER_TENSOR
  long long scale_col[4];
#endif
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int n = n0 + 4 * g + j;
    const int seg = segments > 1 ? n / seg_len : 0;
    const int m = n - seg * seg_len;
    data_col[j] = segmented ? (long long)seg * outer * seg_len + m : n;
#if !PER_TENSOR
    scale_col[j] = segmented ? (long long)seg * scale_rows * seg_blocks + m / BLOCK_INNER
                             : (long long)seg * seg_blocks + m / BLOCK_INNER;
#endif
  }
  const bool word_loads = (inner & 3) == 0 && (seg_len & 3) == 0 && aligned(data, 4);
#if PER_TENSOR
  const float tensor_mult = reciprocal_rn(*tensor_scale);
#endif
  u32 amax_bits = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int o = o0 + row + 8 * i;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (o < outer) {
      if (word_loads) {
        if (n0 + 4 * g < inner) {
          const u32 w = *reinterpret_cast<const u32*>(data + data_col[0] + o * row_stride);
          decode2(u16(w), v[0], v[1]);
          decode2(u16(w >> 16), v[2], v[3]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float unused;
          if (n0 + 4 * g + j < inner) decode2(data[data_col[j] + o * row_stride], v[j], unused);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (n0 + 4 * g + j >= inner) continue;  // stays 0, never stored
#if PER_TENSOR
        const float mult = tensor_mult;
#else
        // A word's four elements share a block; per element otherwise.
        const long long at = (word_loads ? scale_col[0] : scale_col[j]) + (o / BLOCK_OUTER) * scale_row_stride;
#if MX
        const float mult = e8m0_value(reinterpret_cast<const u8*>(block_scales)[at]);
#else
        const float mult = reinterpret_cast<const float*>(block_scales)[at];
#endif
#endif
        v[j] = canonical(v[j] * mult);
        amax_bits = max(amax_bits, abs_bits(v[j]));
      }
#if !TRANSPOSE
      const long long at = (long long)o * inner + n0 + 4 * g;
      if ((inner & 3) == 0 && aligned(out, WIDE_OUT ? 16 : 8)) {
        if (n0 + 4 * g < inner) store4(out + at, v);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (n0 + 4 * g + j < inner) store_element(out + at + j, v[j]);
      }
#endif
    }
#if TRANSPOSE
#pragma unroll
    for (int j = 0; j < 4; ++j) tile[(4 * g + j) * 65 + row + 8 * i] = v[j];
#endif
  }
#if TRANSPOSE
  __syncthreads();
  // out[n][o]: warp w writes tile rows 16w .. 16w + 15, lane l outer 2l, 2l + 1.
  const bool pairs = (outer & 1) == 0 && aligned(out, WIDE_OUT ? 8 : 4);
  for (int r = 0; r < 16; ++r) {
    const int nn = 16 * warp + r, n = n0 + nn, o = o0 + 2 * lane;
    if (n >= inner || o >= outer) continue;
    const float lo = tile[nn * 65 + 2 * lane], hi = tile[nn * 65 + 2 * lane + 1];
    const long long at = (long long)n * outer + o;
    if (pairs) {
      store2(out + at, lo, hi);
    } else {
      store_element(out + at, lo);
      if (o + 1 < outer) store_element(out + at + 1, hi);
    }
  }
#endif
#if AMAX
  amax_bits = block_max_u32(amax_bits, reduce32);
  if (t == 0 && amax_bits != 0) atomicMax(amax_out, amax_bits);
#endif
}
)";
  return {k.name(), k.name(), s.str(), {}};
}

}  // namespace fp8c
