// The CUDA C++ printer for BlockQuantizeKernel.
//
// One block of 256 threads owns a 128 x 128 tile, which holds whole scaling
// blocks of every kind (tiles start at multiples of 128). Thread t takes the
// 8 adjacent columns 8g (g = t % 16) of the 8 rows 64p + 4q + i (q = t / 16,
// p in 0..1, i in 0..3), the layout of the per-tensor cast-transpose
// (cuda_quantize.cpp), and keeps them in registers as loaded, from the one
// read of the input to the FP8 stores:
//   1. eight 16-byte loads, all issued before any is used;
//   2. amaxes on the loaded words, not on decoded floats (16-bit inputs: two
//      magnitudes per word, compared two at a time);
//   3. rowwise: a row's 128 columns sit in the 16 lanes of a half warp (MX: a
//      32-column segment in 4 lanes); shuffles that halve the rows each lane
//      keeps leave one row per lane pair (MX: two rows per lane), so each
//      scale is computed once; the multipliers go through shared memory, back
//      to the same warp; the FP8 rows leave as 8-byte stores from registers;
//   4. columnwise: partial maxima over the 8 rows of lanes t and t ^ 16 go to
//      an 8 KiB shared array, reduced down each column by one thread (MX: per
//      32-row block, two per thread); the FP8 data is packed 4 rows to a word,
//      staged in a skewed [128][33] word array (the partial maxima's space)
//      and leaves as one 128-byte column segment per warp store;
//   5. 128x128: one amax per tile, by warp shuffles and 8 shared words.
// 17-21 KB of static shared memory, no dynamic; launch bounds cap 16-bit
// inputs at 64 registers, so 4 blocks fit on an SM (fp32 input: 2).
// Edge tiles, and shapes or pointers the wide accesses cannot take (cols not
// a multiple of 8; columnwise with rows not a multiple of 4), run the same
// code with bounds-checked loads and stores (element-wise where not wide):
// out-of-range elements load as +0, which never raises an amax, and are never
// stored.
// With dact (BlockQuantizeKernel::dact) the loads read dy and the saved z and
// keep dz = dy * act'(z) in fp32, as an fp32 input is kept (2 blocks an SM).
// The scale and conversion arithmetic (block_scale, mx_code, mx_multiplier,
// fp8(v * multiplier)) is that of the first, element-wise version, which
// matched the CPU reference bit for bit on the H200. tests/emulation runs
// this source on the CPU against the reference.

#include <sstream>

#include "codegen/kernels/block_quantize.hpp"
#include "codegen/kernels/cuda_activation.hpp"
#include "codegen/kernels/cuda_prelude.hpp"

namespace fp8c {
std::string BlockQuantizeKernel::name() const {
  std::string n = "block_quantize_" + std::string(to_string(input)) + "_" +
                  std::string(to_string(format)) + "_" + scaling_tag(scaling);
  n += rowwise ? "_r" : "";
  n += columnwise ? "_c" : "";
  if (pow2) n += "_pow2";
  if (k_block_major) n += "_kbm";
  if (dact != Activation::none) n += "_d" + std::string(to_string(dact));
  return n;
}

KernelSource emit_cuda(const BlockQuantizeKernel& k) {
  require_fp8(k.format, "block quantize kernel format");
  if (k.scaling != Scaling::block_1x128 && k.scaling != Scaling::block_128x128 &&
      k.scaling != Scaling::mx_1x32)
    throw std::invalid_argument("block quantize: not a block scaling: " +
                                std::string(to_string(k.scaling)));
  if (k.k_block_major && k.scaling != Scaling::block_1x128)
    throw std::invalid_argument("block quantize: K-block-major scales are for block_1x128, not " +
                                std::string(to_string(k.scaling)));
  const bool dact = k.dact != Activation::none;
  if (dact && k.input != ElemType::bf16 && k.input != ElemType::fp16)
    throw std::invalid_argument("block quantize: dact takes a bf16 or fp16 input, not " +
                                std::string(to_string(k.input)));
  // With dact the kernel holds dz in fp32 from the load on: in_t is float,
  // as for an fp32 input, and dy_t the type x and pre are stored in.
  const bool wide = k.input == ElemType::fp32 || dact;
  std::ostringstream s;
  // MIN_BLOCKS: blocks per SM the launch bounds ask for. 16-bit inputs fit
  // 64 registers without spilling (4 blocks); fp32 keeps 64 loaded words
  // alone, so 2.
  s << cuda_prelude();
  if (dact) s << cuda_activation_grad_function(k.dact);
  s << "typedef " << (dact ? "float" : cuda_storage_type(k.input)) << " in_t;\n"
    << "typedef " << cuda_storage_type(k.input) << " dy_t;\n"
    << "#define DACT " << cuda_bool(dact) << "\n"
    << "#define ROWWISE " << cuda_bool(k.rowwise) << "\n"
    << "#define COLUMNWISE " << cuda_bool(k.columnwise) << "\n"
    << "#define MX " << cuda_bool(k.scaling == Scaling::mx_1x32) << "\n"
    << "#define SQUARE " << cuda_bool(k.scaling == Scaling::block_128x128) << "\n"
    << "#define POW2 " << cuda_bool(k.pow2) << "\n"
    << "#define K_BLOCK_MAJOR " << cuda_bool(k.k_block_major) << "\n"
    << "#define FP8_MAX " << (k.format == ElemType::e4m3 ? "448.0f" : "57344.0f") << "\n"
    << "#define ELEMENT_EMAX " << (k.format == ElemType::e4m3 ? 8 : 15) << "\n"
    << "#define PACK " << cuda_pack_function(k.format) << "\n"
    << "#define WIDE " << cuda_bool(wide) << "\n"
    << "#define MIN_BLOCKS " << (wide ? 2 : 4) << "\n";
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

)" << cuda_row_loads()
    << R"(
// Bounds-checked: the elements at c + j < cols of a row < rows, +0 for the
// rest (edge tiles; load_raw for whole rows of 8).
#if WIDE
__device__ __forceinline__ raw8 load_checked(const in_t* __restrict__ p, int r, int c, int rows,
                                             int cols, bool wide) {
  raw8 w;
  w.a = w.b = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (r >= rows || c >= cols) return w;
  const long long offset = (long long)r * cols + c;
  if (wide) return load_raw(p, offset);
  float e[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) e[j] = c + j < cols ? p[offset + j] : 0.0f;
  w.a = make_float4(e[0], e[1], e[2], e[3]);
  w.b = make_float4(e[4], e[5], e[6], e[7]);
  return w;
}
#else
__device__ __forceinline__ raw8 load_checked(const in_t* __restrict__ p, int r, int c, int rows,
                                             int cols, bool wide) {
  raw8 w = make_uint4(0u, 0u, 0u, 0u);
  if (r >= rows || c >= cols) return w;
  const long long offset = (long long)r * cols + c;
  if (wide) return load_raw(p, offset);
  const u16* e = reinterpret_cast<const u16*>(p) + offset;
  u32 h[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int j = 0; j < 8; ++j)
    if (c + j < cols) h[j >> 1] |= u32(e[j]) << (16 * (j & 1));
  return make_uint4(h[0], h[1], h[2], h[3]);
}
#endif

#if DACT
// x * act'(pre) for 8 elements of a row, rounded as the backward epilogue
// rounds it (one fp32 multiply, never fused into an FMA).
__device__ __forceinline__ float dz(float dy, float z) { return __fmul_rn(dy, dact(z)); }
__device__ __forceinline__ raw8 load_dz(const dy_t* __restrict__ x, const dy_t* __restrict__ pre,
                                        long long offset) {
  const uint4 d = *reinterpret_cast<const uint4*>(x + offset);
  const uint4 z = *reinterpret_cast<const uint4*>(pre + offset);
  float dv[8], zv[8];
  unpack2(d.x, dy_t(), dv[0], dv[1]); unpack2(d.y, dy_t(), dv[2], dv[3]);
  unpack2(d.z, dy_t(), dv[4], dv[5]); unpack2(d.w, dy_t(), dv[6], dv[7]);
  unpack2(z.x, dy_t(), zv[0], zv[1]); unpack2(z.y, dy_t(), zv[2], zv[3]);
  unpack2(z.z, dy_t(), zv[4], zv[5]); unpack2(z.w, dy_t(), zv[6], zv[7]);
  raw8 r;
  r.a = make_float4(dz(dv[0], zv[0]), dz(dv[1], zv[1]), dz(dv[2], zv[2]), dz(dv[3], zv[3]));
  r.b = make_float4(dz(dv[4], zv[4]), dz(dv[5], zv[5]), dz(dv[6], zv[6]), dz(dv[7], zv[7]));
  return r;
}
__device__ __forceinline__ raw8 load_dz_checked(const dy_t* __restrict__ x,
                                                const dy_t* __restrict__ pre, int r, int c,
                                                int rows, int cols, bool wide) {
  raw8 w;
  w.a = w.b = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (r >= rows || c >= cols) return w;
  const long long offset = (long long)r * cols + c;
  if (wide) return load_dz(x, pre, offset);
  float e[8];
#pragma unroll
  for (int j = 0; j < 8; ++j)
    e[j] = c + j < cols ? dz(to_float(x[offset + j]), to_float(pre[offset + j])) : 0.0f;
  w.a = make_float4(e[0], e[1], e[2], e[3]);
  w.b = make_float4(e[4], e[5], e[6], e[7]);
  return w;
}
#define LOAD_RAW(offset) load_dz(x, pre, offset)
#define LOAD_CHECKED(r, c, wide) load_dz_checked(x, pre, r, c, rows, cols, wide)
#define IN_ALIGNED() ((reinterpret_cast<u64>(x) & 15) == 0 && (reinterpret_cast<u64>(pre) & 15) == 0)
#else
#define LOAD_RAW(offset) load_raw(x, offset)
#define LOAD_CHECKED(r, c, wide) load_checked(x, r, c, rows, cols, wide)
#define IN_ALIGNED() ((reinterpret_cast<u64>(x) & 15) == 0)
#endif

// Magnitudes for the amaxes, straight from the loaded words: the amax pass
// never decodes, so the compiler has no decoded floats to keep alive until
// the conversions. A max of |x| as bits is the max of |x| (every NaN sorts
// above Inf), also on 16-bit halves, which max2 compares two at a time.
#if WIDE
#define MAG_WORDS 8  // one element per word
__device__ __forceinline__ void magnitudes(const raw8& r, u32 m[8]) {
  m[0] = abs_bits(r.a.x); m[1] = abs_bits(r.a.y); m[2] = abs_bits(r.a.z); m[3] = abs_bits(r.a.w);
  m[4] = abs_bits(r.b.x); m[5] = abs_bits(r.b.y); m[6] = abs_bits(r.b.z); m[7] = abs_bits(r.b.w);
}
__device__ __forceinline__ u32 max2(u32 a, u32 b) { return max(a, b); }
// A magnitude word's elements as |x| float bits (e[0 .. 1 or 2)).
__device__ __forceinline__ void widen(u32 m, u32 e[]) { e[0] = m; }
#else
#define MAG_WORDS 4  // two elements per word
__device__ __forceinline__ void magnitudes(const raw8& r, u32 m[4]) {
  m[0] = r.x & 0x7FFF7FFFu; m[1] = r.y & 0x7FFF7FFFu; m[2] = r.z & 0x7FFF7FFFu; m[3] = r.w & 0x7FFF7FFFu;
}
__device__ __forceinline__ u32 max2(u32 a, u32 b) { return __vmaxu2(a, b); }
__device__ __forceinline__ void widen(u32 m, u32 e[]) {
  float lo, hi;
  unpack2(m, in_t(), lo, hi);  // magnitudes: the floats come out positive
  e[0] = __float_as_uint(lo);
  e[1] = __float_as_uint(hi);
}
#endif
#define PER_WORD (8 / MAG_WORDS)

// The columnwise pass decodes the words again, written unlike decode() (a
// byte permute, not a shift) so that the compiler recomputes the floats
// instead of keeping 64 of them alive across the barriers since the rowwise
// pass (fp16: the halves swapped, then converted).
__device__ __forceinline__ u32 permute(u32 w, u32 selector) {
  u32 r;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(w), "r"(selector));
  return r;
}
#if WIDE
__device__ __forceinline__ void decode_again(const raw8& r, float v[8]) { decode(r, v); }
#else
__device__ __forceinline__ void unpack_again(u32 w, bf16_t, float& lo, float& hi) {
  lo = __uint_as_float(permute(w, 0x1044u));
  hi = __uint_as_float(permute(w, 0x3244u));
}
__device__ __forceinline__ void unpack_again(u32 w, fp16_t, float& lo, float& hi) {
  unpack2(permute(w, 0x1032u), fp16_t(), hi, lo);
}
__device__ __forceinline__ void decode_again(const raw8& w, float v[8]) {
  unpack_again(w.x, in_t(), v[0], v[1]);
  unpack_again(w.y, in_t(), v[2], v[3]);
  unpack_again(w.z, in_t(), v[4], v[5]);
  unpack_again(w.w, in_t(), v[6], v[7]);
}
#endif

)" << cuda_streaming_stores()
    << R"(
// Eight FP8 bytes of one row, from the element x multiplier products.
__device__ __forceinline__ uint2 pack8(const float v[8], float m) {
  uint2 r;
  r.x = u32(PACK(v[0] * m, v[1] * m)) | (u32(PACK(v[2] * m, v[3] * m)) << 16);
  r.y = u32(PACK(v[4] * m, v[5] * m)) | (u32(PACK(v[6] * m, v[7] * m)) << 16);
  return r;
}

// Exchange half of the n + n values a lane holds with the lane `bit` away and
// keep the maxima: the lane with the bit set keeps a[n .. 2n), the other
// a[0 .. n), both now in a[0 .. n). One shuffle per kept value.
// With `packed`, the values are magnitude words (max2).
template <int n, bool packed = false>
__device__ __forceinline__ void fold(u32 a[], int lane, int bit) {
  const bool upper = lane & bit;
#pragma unroll
  for (int k = 0; k < n; ++k) {
    const u32 keep = upper ? a[k + n] : a[k], give = upper ? a[k] : a[k + n];
    const u32 other = __shfl_xor_sync(0xFFFFFFFFu, give, bit);
    a[k] = packed ? max2(keep, other) : max(keep, other);
  }
}

extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS)
)" << k.name()
    << R"((const dy_t* __restrict__ x, u8* __restrict__ row_out, void* __restrict__ row_scales,
     u8* __restrict__ col_out, void* __restrict__ col_scales, int rows, int cols)"
    << (dact ? ", const dy_t* __restrict__ pre" : "") << R"() {
  // Columnwise FP8 as [column][row / 4] words, skewed; before that, the
  // partial column amaxes as [pass * 8 + warp][column].
  __shared__ __align__(16) u32 staged[128 * 33];
  __shared__ __align__(16) float row_mult[4 * 132];  // MX: [segment][row], padded; else [row]
  __shared__ __align__(16) float col_mult[4 * 128];  // MX: [32-row block][column]; else [column]
  __shared__ u32 warp_amax[8];                       // 128x128: per warp
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int g = t & 15, q = t >> 4;  // columns 8g .. 8g + 7; rows 64p + 4q + i
  const int r0 = blockIdx.y * 128, c0 = blockIdx.x * 128;
  const int nr = min(128, rows - r0), nc = min(128, cols - c0);
  // 16-byte loads and 8-byte row stores need cols % 8 == 0, 4-byte column
  // stores rows % 4 == 0, and the pointers aligned accordingly.
  const bool wide_in = (cols & 7) == 0 && IN_ALIGNED();
  const bool wide_row = (cols & 7) == 0 && (reinterpret_cast<u64>(row_out) & 7) == 0;
  const bool wide_col = (rows & 3) == 0 && (reinterpret_cast<u64>(col_out) & 3) == 0;
  const bool fast = nr == 128 && nc == 128 && wide_in && (!ROWWISE || wide_row) &&
                    (!COLUMNWISE || wide_col);

  raw8 raw[8];  // raw[4p + i]: row 64p + 4q + i
  if (fast) {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      raw[k] = LOAD_RAW((long long)(r0 + 64 * (k >> 2) + 4 * q + (k & 3)) * cols + c0 + 8 * g);
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      raw[k] = LOAD_CHECKED(r0 + 64 * (k >> 2) + 4 * q + (k & 3), c0 + 8 * g, wide_in);
  }

#if SQUARE
  // One scale for the tile: every thread reduces the 8 warp maxima and
  // computes it.
  float row_m = 0.0f, col_m = 0.0f;
  {
    u32 mag[MAG_WORDS] = {};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      u32 w[MAG_WORDS];
      magnitudes(raw[k], w);
#pragma unroll
      for (int j = 0; j < MAG_WORDS; ++j) mag[j] = max2(mag[j], w[j]);
    }
    u32 m = 0u;
#pragma unroll
    for (int j = 0; j < MAG_WORDS; ++j) {
      u32 e[PER_WORD];
      widen(mag[j], e);
#pragma unroll
      for (int h = 0; h < PER_WORD; ++h) m = max(m, e[h]);
    }
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    if (lane == 0) warp_amax[warp] = m;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < 8; ++w) m = max(m, warp_amax[w]);
    const float s = block_scale(__uint_as_float(m));
    row_m = col_m = s;
    if (t == 0) {
      const int row_blocks = (rows + 127) / 128, col_blocks = (cols + 127) / 128;
      if (ROWWISE) reinterpret_cast<float*>(row_scales)[blockIdx.y * col_blocks + blockIdx.x] = 1.0f / s;
      if (COLUMNWISE) reinterpret_cast<float*>(col_scales)[blockIdx.x * row_blocks + blockIdx.y] = 1.0f / s;
    }
  }
#else
  u32 a[8];  // a[4p + i]: amax of row 64p + 4q + i over this lane's 8 columns
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    u32 col[MAG_WORDS] = {};  // this lane's 4 rows of the pass
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      u32 w[MAG_WORDS];
      magnitudes(raw[4 * p + i], w);
      u32 m = 0u;
#pragma unroll
      for (int j = 0; j < MAG_WORDS; ++j) {
        m = max2(m, w[j]);
        col[j] = max2(col[j], w[j]);
      }
      u32 e[PER_WORD];
      widen(m, e);
      a[4 * p + i] = PER_WORD == 1 ? e[0] : max(e[0], e[PER_WORD - 1]);
    }
#if COLUMNWISE
    // Partial column amaxes: lanes t and t ^ 16 together hold 8 rows of the
    // pass (64p + 8 * warp ..) of columns 8g .. 8g + 7; after the fold this
    // lane has 4 of those columns (4h .. 4h + 3), stored as one 16-byte word.
    fold<MAG_WORDS / 2, true>(col, lane, 16);
    u32 e[4];
#pragma unroll
    for (int j = 0; j < MAG_WORDS / 2; ++j) widen(col[j], &e[j * PER_WORD]);
    *reinterpret_cast<uint4*>(&staged[(8 * p + warp) * 128 + 8 * g + 4 * (lane >> 4)]) =
        make_uint4(e[0], e[1], e[2], e[3]);
#endif
  }
#if ROWWISE
  {
#if MX
    // Over the 4 lanes of a 32-column segment (lane bits 0 and 1): this lane
    // keeps rows 4 * b1 + 2 * b0 + {0, 1} of its 8.
    fold<4>(a, lane, 2);
    fold<2>(a, lane, 1);
    const int seg = g >> 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = 4 * ((lane >> 1) & 1) + 2 * (lane & 1) + h;
      const int row = 64 * (k >> 2) + 4 * q + (k & 3);
      const u32 code = mx_code(a[h]);
      row_mult[seg * 132 + row] = mx_multiplier(code);
      if (row < nr && 32 * seg < nc)
        reinterpret_cast<u8*>(row_scales)[(long long)(r0 + row) * ((cols + 31) / 32) + c0 / 32 + seg] = u8(code);
    }
#else
    // Over the 16 lanes of the row (lane bits 0 to 3): lanes 2m and 2m + 1
    // end with row m of the 8.
    fold<4>(a, lane, 8);
    fold<2>(a, lane, 4);
    fold<1>(a, lane, 2);
    a[0] = max(a[0], __shfl_xor_sync(0xFFFFFFFFu, a[0], 1));
    const float s = block_scale(__uint_as_float(a[0]));
    if ((lane & 1) == 0) {
      const int k = g >> 1, row = 64 * (k >> 2) + 4 * q + (k & 3);
      row_mult[row] = s;
      if (row < nr)
        reinterpret_cast<float*>(row_scales)[K_BLOCK_MAJOR ? (long long)blockIdx.x * rows + r0 + row
                                                           : (long long)(r0 + row) * ((cols + 127) / 128) + blockIdx.x] = 1.0f / s;
    }
#endif
    __syncwarp();  // a row's multipliers are written and read by its own warp
  }
#endif
#endif  // SQUARE

#if ROWWISE
  // Row k's FP8 bytes. Whole tiles store them from a loop of their own: with
  // the check inside one loop, the compiler computes all 8 rows before the
  // first store and needs 40 more registers.
  const auto row_bytes = [&](int k) {
    const int row = 64 * (k >> 2) + 4 * q + (k & 3);
#if SQUARE
    const float m = row_m;
#else
    // Rows 4q .. 4q + 3 of a pass: one 16-byte shared load.
#if MX
    const float4 m4 = *reinterpret_cast<const float4*>(&row_mult[(g >> 2) * 132 + (row & ~3)]);
#else
    const float4 m4 = *reinterpret_cast<const float4*>(&row_mult[row & ~3]);
#endif
    const float m = (k & 3) == 0 ? m4.x : (k & 3) == 1 ? m4.y : (k & 3) == 2 ? m4.z : m4.w;
#endif
    float v[8];
    decode(raw[k], v);
    return pack8(v, m);
  };
  u8* const row_base = row_out + (long long)(r0 + 4 * q) * cols + c0 + 8 * g;
  if (fast) {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      store_streaming(row_base + (long long)(64 * (k >> 2) + (k & 3)) * cols, row_bytes(k));
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int row = 64 * (k >> 2) + 4 * q + (k & 3);
      const uint2 packed = row_bytes(k);
      u8* out = row_base + (long long)(64 * (k >> 2) + (k & 3)) * cols;
      if (row < nr && 8 * g < nc) {
        if (wide_row) {
          *reinterpret_cast<uint2*>(out) = packed;
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j)
            if (8 * g + j < nc) out[j] = u8((j < 4 ? packed.x : packed.y) >> (8 * (j & 3)));
        }
      }
    }
  }
#endif

#if COLUMNWISE
#if !SQUARE
  __syncthreads();  // the partial column amaxes are in
  {
    // A column block's partial maxima: 1x128, the 16 of column t (t < 128);
    // MX, the 4 of each of the two 32-row blocks of column t % 128 in pass t / 128.
    const u32* part = staged;
#if MX
    const int c = t & 127, p = t >> 7;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      u32 m = 0u;
#pragma unroll
      for (int w = 0; w < 4; ++w) m = max(m, part[(8 * p + 4 * h + w) * 128 + c]);
      const int block = 2 * p + h;
      const u32 code = mx_code(m);
      col_mult[block * 128 + c] = mx_multiplier(code);
      if (c < nc && 32 * block < nr)
        reinterpret_cast<u8*>(col_scales)[(long long)(c0 + c) * ((rows + 31) / 32) + r0 / 32 + block] = u8(code);
    }
#else
    if (t < 128) {
      u32 m = 0u;
#pragma unroll
      for (int i = 0; i < 16; ++i) m = max(m, part[i * 128 + t]);
      const float s = block_scale(__uint_as_float(m));
      col_mult[t] = s;
      if (t < nc)
        reinterpret_cast<float*>(col_scales)[K_BLOCK_MAJOR ? (long long)blockIdx.y * cols + c0 + t
                                                           : (long long)(c0 + t) * ((rows + 127) / 128) + blockIdx.y] = 1.0f / s;
    }
#endif
  }
  __syncthreads();  // the multipliers are in; the partial maxima are dead
#endif
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    float m[8];
#if SQUARE
#pragma unroll
    for (int j = 0; j < 8; ++j) m[j] = col_m;
#else
#if MX
    const float* cm = &col_mult[(2 * p + (q >> 3)) * 128 + 8 * g];
#else
    const float* cm = &col_mult[8 * g];
#endif
    const float4 m0 = *reinterpret_cast<const float4*>(cm), m1 = *reinterpret_cast<const float4*>(cm + 4);
    m[0] = m0.x; m[1] = m0.y; m[2] = m0.z; m[3] = m0.w;
    m[4] = m1.x; m[5] = m1.y; m[6] = m1.z; m[7] = m1.w;
#endif
    float v[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i) decode_again(raw[4 * p + i], v[i]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      // The word's slot is XORed with the column's 32-column group, so a
      // warp's 32 stores land on (nearly) distinct banks; readers undo it.
      const u32 word = u32(PACK(v[0][j] * m[j], v[1][j] * m[j])) |
                       (u32(PACK(v[2][j] * m[j], v[3][j] * m[j])) << 16);
      staged[(8 * g + j) * 33 + ((16 * p + q) ^ ((g >> 2) & 3))] = word;
    }
  }
  __syncthreads();
  // Each warp writes 16 columns, one 128-byte segment (lane: rows 4 * lane ..
  // 4 * lane + 3) per store instruction.
#pragma unroll 4
  for (int cc = 0; cc < 16; ++cc) {
    const int col = 16 * warp + cc;
    const u32 word = staged[col * 33 + (lane ^ ((col >> 5) & 3))];
    u8* out = col_out + (long long)(c0 + col) * rows + r0 + 4 * lane;
    if (fast) {
      store_streaming(out, word);
    } else if (col < nc && 4 * lane < nr) {
      if (wide_col) {
        *reinterpret_cast<u32*>(out) = word;
      } else {
#pragma unroll
        for (int b = 0; b < 4; ++b)
          if (4 * lane + b < nr) out[b] = u8(word >> (8 * b));
      }
    }
  }
#endif
}
)";
  return {k.name(), k.name(), s.str(), {}};
}

}  // namespace fp8c
