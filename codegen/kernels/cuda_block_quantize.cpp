// The CUDA C++ printer for BlockQuantizeKernel.
//
// One block of 256 threads owns a 128 x 128 tile, which holds whole scaling
// blocks of every kind (tiles start at multiples of 128). The tile is staged
// in shared memory as floats, [128][129] (the extra column keeps both row and
// column walks free of bank conflicts); then
//   1. per-row amaxes (four 32-wide segments each) by warp shuffles, and
//      per-column amaxes (four 32-high segments each) by a column walk;
//   2. the scales of the blocks the usages need, written to the scale tensors;
//   3. the rowwise and columnwise FP8 data, each from the staged floats.
// This first version favours being correct for every shape over speed: its
// global loads and stores are element-wise (coalesced, not vectorised).

#include <sstream>

#include "codegen/kernels/block_quantize.hpp"
#include "codegen/kernels/cuda_prelude.hpp"

namespace fp8c {
namespace {

const char* bool_text(bool b) {
  return b ? "true" : "false";
}

std::string scaling_tag(Scaling s) {
  switch (s) {
    case Scaling::block_1x128:
      return "b1x128";
    case Scaling::block_128x128:
      return "b128x128";
    case Scaling::mx_1x32:
      return "mx1x32";
    default:
      return "unsupported";
  }
}

}  // namespace

std::string BlockQuantizeKernel::name() const {
  std::string n = "block_quantize_" + std::string(to_string(input)) + "_" +
                  std::string(to_string(format)) + "_" + scaling_tag(scaling);
  n += rowwise ? "_r" : "";
  n += columnwise ? "_c" : "";
  if (pow2) n += "_pow2";
  return n;
}

KernelSource emit_cuda(const BlockQuantizeKernel& k) {
  if (k.scaling != Scaling::block_1x128 && k.scaling != Scaling::block_128x128 &&
      k.scaling != Scaling::mx_1x32)
    throw std::invalid_argument("block quantize: not a block scaling: " +
                                std::string(to_string(k.scaling)));
  std::ostringstream s;
  s << cuda_prelude();
  s << "typedef " << cuda_storage_type(k.input) << " in_t;\n"
    << "#define ROWWISE " << bool_text(k.rowwise) << "\n"
    << "#define COLUMNWISE " << bool_text(k.columnwise) << "\n"
    << "#define MX " << bool_text(k.scaling == Scaling::mx_1x32) << "\n"
    << "#define SQUARE " << bool_text(k.scaling == Scaling::block_128x128) << "\n"
    << "#define POW2 " << bool_text(k.pow2) << "\n"
    << "#define FP8_MAX " << (k.format == Fp8Format::e4m3 ? "448.0f" : "57344.0f") << "\n"
    << "#define ELEMENT_EMAX " << (k.format == Fp8Format::e4m3 ? 8 : 15) << "\n"
    << "#define PACK " << cuda_pack_function(k.format) << "\n";
  s << R"(
// numerics::blockwise_scale: fp8_max / amax; 1 for a zero, Inf or NaN amax;
// FLT_MAX for an infinite quotient; optionally rounded down to 2^k.
__device__ __forceinline__ float block_scale(float amax) {
  if (!(amax > 0.0f) || amax == __int_as_float(0x7F800000)) return 1.0f;
  float s = FP8_MAX / amax;
  if (s == __int_as_float(0x7F800000)) s = __int_as_float(0x7F7FFFFF);
  if (POW2) s = __uint_as_float(__float_as_uint(s) & 0xFF800000u);  // s is normal here
  return s;
}

// numerics::mx_block_scale with the round-up rule: the smallest 2^e with
// amax <= fp8_max * 2^e, as an E8M0 code (NaN 0xFF; +Inf 0xFE; 0 for tiny).
__device__ __forceinline__ u32 mx_code(u32 m) {
  if (m > 0x7F800000u) return 0xFFu;
  if (m == 0x7F800000u) return 0xFEu;
  if (m == 0u) return 0u;
  const int biased = int(m >> 23);
  u32 fraction = m & 0x7FFFFFu;
  int e = biased - 127;
  if (biased == 0) {
    const int width = 32 - __clz(m);
    e = width - 1 - 149;
    fraction = (m << (24 - width)) & 0x7FFFFFu;
  }
  e -= ELEMENT_EMAX;
  if (fraction > 0x600000u) ++e;
  return e < -127 ? 0u : u32(e + 127);
}

// The multiplier an E8M0 code stands for: 2^(127 - code).
__device__ __forceinline__ float mx_multiplier(u32 code) {
  if (code == 0xFFu) return __uint_as_float(0x7FFFFFFFu);
  if (code == 0xFEu) return __uint_as_float(0x00400000u);
  return __uint_as_float((254u - code) << 23);
}

__device__ __forceinline__ u8 to_fp8(float v) { return u8(PACK(v, 0.0f) & 0xFF); }

extern "C" __global__ void __launch_bounds__(256)
)" << k.name()
    << R"((const in_t* __restrict__ x, u8* __restrict__ row_out, void* __restrict__ row_scales,
     u8* __restrict__ col_out, void* __restrict__ col_scales, int rows, int cols) {
  extern __shared__ float tile[];       // [128][129]
  __shared__ u32 row_amax[128 * 4];      // [row][32-wide segment], |x| as bits
  __shared__ u32 col_amax[128 * 4];      // [column][32-high segment]
  __shared__ float row_mult[128 * 4];    // the multiplier of each row block / segment
  __shared__ float col_mult[128 * 4];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int r0 = blockIdx.y * 128, c0 = blockIdx.x * 128;
  const int nr = min(128, rows - r0), nc = min(128, cols - c0);

  for (int e = t; e < 128 * 128; e += 256) {
    const int r = e >> 7, c = e & 127;
    tile[r * 129 + c] = (r < nr && c < nc) ? to_float(x[(long long)(r0 + r) * cols + c0 + c]) : 0.0f;
  }
  __syncthreads();

  // 1. Amaxes. Padding is 0, which never raises an amax.
  for (int rr = 0; rr < 16; ++rr) {
    const int r = warp * 16 + rr;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      u32 m = abs_bits(tile[r * 129 + 32 * k + lane]);
      for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
      if (lane == 0) row_amax[r * 4 + k] = m;
    }
  }
  if (t < 128) {
    u32 m[4] = {0u, 0u, 0u, 0u};
    for (int r = 0; r < 128; ++r) m[r >> 5] = max(m[r >> 5], abs_bits(tile[r * 129 + t]));
#pragma unroll
    for (int k = 0; k < 4; ++k) col_amax[t * 4 + k] = m[k];
  }
  __syncthreads();

  // 2. Scales: the multipliers into shared memory, the stored form into the scale tensors.
#if SQUARE
  if (t == 0) {
    u32 m = 0u;
    for (int i = 0; i < 128 * 4; ++i) m = max(m, row_amax[i]);
    const float s = block_scale(__uint_as_float(m));
    row_mult[0] = col_mult[0] = s;
    const int row_blocks = (rows + 127) / 128, col_blocks = (cols + 127) / 128;
    if (ROWWISE) reinterpret_cast<float*>(row_scales)[blockIdx.y * col_blocks + blockIdx.x] = 1.0f / s;
    if (COLUMNWISE) reinterpret_cast<float*>(col_scales)[blockIdx.x * row_blocks + blockIdx.y] = 1.0f / s;
  }
#elif MX
  {
    const int row_segments = (cols + 31) / 32, col_segments = (rows + 31) / 32;
    for (int i = t; i < 128 * 4; i += 256) {
      const int line = i >> 2, k = i & 3;
      if (ROWWISE && line < nr && 32 * k < nc) {
        const u32 code = mx_code(row_amax[i]);
        row_mult[i] = mx_multiplier(code);
        reinterpret_cast<u8*>(row_scales)[(long long)(r0 + line) * row_segments + c0 / 32 + k] = u8(code);
      }
      if (COLUMNWISE && line < nc && 32 * k < nr) {
        const u32 code = mx_code(col_amax[i]);
        col_mult[i] = mx_multiplier(code);
        reinterpret_cast<u8*>(col_scales)[(long long)(c0 + line) * col_segments + r0 / 32 + k] = u8(code);
      }
    }
  }
#else
  if (t < 128) {
    const int row_blocks = (rows + 127) / 128, col_blocks = (cols + 127) / 128;
    if (ROWWISE && t < nr) {
      const u32 m = max(max(row_amax[t * 4], row_amax[t * 4 + 1]), max(row_amax[t * 4 + 2], row_amax[t * 4 + 3]));
      const float s = block_scale(__uint_as_float(m));
      row_mult[t * 4] = s;
      reinterpret_cast<float*>(row_scales)[(long long)(r0 + t) * col_blocks + blockIdx.x] = 1.0f / s;
    }
    if (COLUMNWISE && t < nc) {
      const u32 m = max(max(col_amax[t * 4], col_amax[t * 4 + 1]), max(col_amax[t * 4 + 2], col_amax[t * 4 + 3]));
      const float s = block_scale(__uint_as_float(m));
      col_mult[t * 4] = s;
      reinterpret_cast<float*>(col_scales)[(long long)(c0 + t) * row_blocks + blockIdx.y] = 1.0f / s;
    }
  }
#endif
  __syncthreads();

  // 3. The FP8 data.
#if ROWWISE
  for (int e = t; e < 128 * 128; e += 256) {
    const int r = e >> 7, c = e & 127;
    if (r >= nr || c >= nc) continue;
#if SQUARE
    const float m = row_mult[0];
#elif MX
    const float m = row_mult[r * 4 + (c >> 5)];
#else
    const float m = row_mult[r * 4];
#endif
    row_out[(long long)(r0 + r) * cols + c0 + c] = to_fp8(tile[r * 129 + c] * m);
  }
#endif
#if COLUMNWISE
  for (int e = t; e < 128 * 128; e += 256) {
    const int c = e >> 7, r = e & 127;
    if (r >= nr || c >= nc) continue;
#if SQUARE
    const float m = col_mult[0];
#elif MX
    const float m = col_mult[c * 4 + (r >> 5)];
#else
    const float m = col_mult[c * 4];
#endif
    col_out[(long long)(c0 + c) * rows + r0 + r] = to_fp8(tile[r * 129 + c] * m);
  }
#endif
}
)";
  return {k.name(), k.name(), s.str(), {}};
}

}  // namespace fp8c
