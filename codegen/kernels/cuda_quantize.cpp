// The CUDA C++ printer for QuantizeKernel.
//
// One block of 256 threads owns a 128x128 tile. On the fast path (a whole
// tile, cols % 8 == 0, rows % 4 == 0) thread t takes 8 adjacent columns
// (t % 16) of 4 adjacent rows (t / 16) per pass, two passes per tile:
//   - loads are 16-byte vectors, adjacent threads on adjacent columns;
//   - rowwise FP8 leaves as 8-byte stores straight from registers;
//   - columnwise FP8 is packed four rows to a word in registers, staged in
//     shared memory as [128 columns][33 words] (the 33rd word skews the banks
//     for readers, an XOR of the word slot for writers), then each warp
//     writes whole 128-byte column segments.
// Partial tiles and unaligned shapes take the element-wise path, which is
// correct for any shape and slower; only edge tiles take it when the shape is
// aligned.

#include <sstream>

#include "codegen/kernels/cuda_activation.hpp"
#include "codegen/kernels/cuda_prelude.hpp"
#include "codegen/kernels/quantize.hpp"

#include <stdexcept>

namespace fp8c {
std::string QuantizeKernel::name() const {
  std::string n =
      "quantize_" + std::string(to_string(input)) + "_" + std::string(to_string(format));
  n += rowwise ? "_r" : "";
  n += columnwise ? "_c" : "";
  if (amax) n += "_amax";
  if (dbias) n += "_dbias";
  if (dact != Activation::none) n += "_d" + std::string(to_string(dact));
  if (scale_from_amax) n += pow2_scale ? "_current_pow2" : "_current";
  if (row_group > 0) (n += "_g") += std::to_string(row_group);
  if (wide_column_stores) n += "_wcs";
  if (min_blocks_per_sm > 0) (n += "_mb") += std::to_string(min_blocks_per_sm);
  return n;
}

KernelSource emit_cuda(const QuantizeKernel& k) {
  require_fp8(k.format, "quantize kernel format");
  const std::string in = cuda_storage_type(k.input);
  const std::string pack = cuda_pack_function(k.format);
  const bool wide = k.input == ElemType::fp32;  // 8 values are two 16-byte vectors
  std::ostringstream s;
  s << cuda_prelude() << cuda_activation_grad_function(k.dact);
  s << "typedef " << in << " in_t;\n"
    << "#define ROWWISE " << cuda_bool(k.rowwise) << "\n"
    << "#define COLUMNWISE " << cuda_bool(k.columnwise) << "\n"
    << "#define AMAX " << cuda_bool(k.amax) << "\n"
    << "#define DBIAS " << cuda_bool(k.dbias) << "\n"
    << "#define DACT " << cuda_bool(k.dact != Activation::none) << "\n"
    << "#define SCALE_FROM_AMAX " << cuda_bool(k.scale_from_amax) << "\n"
    << "#define POW2 " << cuda_bool(k.pow2_scale) << "\n"
    << "#define FP8_MAX " << (k.format == ElemType::e4m3 ? "448.0f" : "57344.0f") << "\n"
    << "#define PACK " << pack << "\n"
    << "#define WIDE " << cuda_bool(wide) << "\n"
    << "#define ROW_GROUP " << k.row_group << "\n"
    << "#define WIDE_COLUMN_STORES " << cuda_bool(k.wide_column_stores) << "\n"
    << "#define LAUNCH_BOUNDS "
    << (k.min_blocks_per_sm > 0
            ? "__launch_bounds__(256, " + std::to_string(k.min_blocks_per_sm) + ")"
            : std::string("__launch_bounds__(256)"))
    << "\n";
  s << cuda_row_loads() << cuda_streaming_stores();
  // Only this knob's kernels carry the 16-byte store, so the default
  // kernels' source (and cache keys) stay as they were.
  if (k.wide_column_stores)
    s << R"(__device__ __forceinline__ void store_streaming(u8* p, uint4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
)";
  s << R"(

extern "C" __global__ void LAUNCH_BOUNDS
)" << k.name()
    << R"((const in_t* __restrict__ x, const in_t* __restrict__ pre, const float* __restrict__ scale_in,
     const u32* __restrict__ amax_in, u8* __restrict__ row_out, u8* __restrict__ col_out,
     u32* __restrict__ amax_out, float* __restrict__ dbias_partial, float* __restrict__ scale_out,
     int rows, int cols) {
  __shared__ u32 staged[128 * 33];  // columnwise FP8, [column][row / 4], skewed
  __shared__ float colsum[16][128];
  __shared__ u32 reduce32[32];
  const int t = threadIdx.x;
#if ROW_GROUP > 0
  // One-dimensional grid: groups of ROW_GROUP row tiles, each walked down
  // (row fastest) and then across; the last group may be shorter.
  // (Tile counts without rows + 127, which overflows near INT_MAX; the group
  // is at most the row tiles, so per_group <= the launcher's int grid.)
  const int row_tiles = (rows >> 7) + ((rows & 127) != 0);
  const int col_tiles = (cols >> 7) + ((cols & 127) != 0);
  const int group_size = min(ROW_GROUP, row_tiles);
  const int per_group = group_size * col_tiles;
  const int group = blockIdx.x / per_group, in_group = blockIdx.x - group * per_group;
  const int group_rows = min(group_size, row_tiles - group * group_size);
  const int row_tile = group * group_size + in_group % group_rows;
  const int col_tile = in_group / group_rows;
#else
  const int row_tile = blockIdx.y, col_tile = blockIdx.x;
#endif
  const int r0 = row_tile * 128, c0 = col_tile * 128;
#if SCALE_FROM_AMAX
  const float scale = scale_from_amax(__uint_as_float(*amax_in), FP8_MAX, POW2);
  if (scale_out && blockIdx.x == 0 && blockIdx.y == 0 && t == 0) {
    // The scale and its inverse (IEEE division, as numerics::scale_inverse):
    // the GEMM that reads this tensor dequantizes with the inverse.
    float inverse;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(inverse) : "f"(1.0f), "f"(scale));
    scale_out[0] = scale;
    scale_out[4] = inverse;  // 16 bytes on: cuBLASLt reads scales from aligned addresses
  }
#else
  const float scale = *scale_in;
#endif
  u32 amax_bits = 0;
  const bool fast = r0 + 128 <= rows && c0 + 128 <= cols && (cols & 7) == 0 &&
                    (!COLUMNWISE || (rows & 3) == 0);
  if (fast) {
    const int g = t & 15, q = t >> 4;
    const int c = c0 + 8 * g;
    float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    // All eight rows' loads are issued before any is used, so each thread
    // has 128 bytes (256 with fp32 input) in flight.
    raw8 raw[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      raw[i] = load_raw(x, (long long)(r0 + 64 * (i >> 2) + 4 * q + (i & 3)) * cols + c);
#if DACT
    raw8 raw_pre[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      raw_pre[i] = load_raw(pre, (long long)(r0 + 64 * (i >> 2) + 4 * q + (i & 3)) * cols + c);
#endif
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
      float v[4][8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        decode(raw[4 * pass + i], v[i]);
#if DACT
        float p[8];
        decode(raw_pre[4 * pass + i], p);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[i][j] *= dact(p[j]);
#endif
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          amax_bits = max(amax_bits, abs_bits(v[i][j]));
          sums[j] += v[i][j];
        }
      }
#if ROWWISE
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint2 packed;
        packed.x = u32(PACK(v[i][0] * scale, v[i][1] * scale)) |
                   (u32(PACK(v[i][2] * scale, v[i][3] * scale)) << 16);
        packed.y = u32(PACK(v[i][4] * scale, v[i][5] * scale)) |
                   (u32(PACK(v[i][6] * scale, v[i][7] * scale)) << 16);
        store_streaming(row_out + (long long)(r0 + 64 * pass + 4 * q + i) * cols + c, packed);
      }
#endif
#if COLUMNWISE
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        // The row word's slot is XORed with the column's 32-column group, so
        // a warp's 32 stores land on (nearly) distinct banks; readers undo it.
        const u32 word = u32(PACK(v[0][j] * scale, v[1][j] * scale)) |
                         (u32(PACK(v[2][j] * scale, v[3][j] * scale)) << 16);
        staged[(8 * g + j) * 33 + ((16 * pass + q) ^ ((g >> 2) & 3))] = word;
      }
#endif
    }
#if DBIAS
#pragma unroll
    for (int j = 0; j < 8; ++j) colsum[q][8 * g + j] = sums[j];
#endif
#if COLUMNWISE || DBIAS
    __syncthreads();
#endif
#if COLUMNWISE
    {
      const int warp = t >> 5, lane = t & 31;
#if WIDE_COLUMN_STORES
      // 16 bytes a lane: eight lanes cover one column's 128 rows, a warp
      // four columns per store. The four words a lane reads sit in four
      // consecutive slots (XOR of the two low bits only), and the 32 lanes
      // of one read hit 32 distinct banks (column + 4 * chunk + word).
      if ((rows & 15) == 0 && (reinterpret_cast<unsigned long long>(col_out) & 15) == 0) {
        const int chunk = lane & 7;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int col = 16 * warp + 4 * i + (lane >> 3);
          const u32* w = staged + col * 33;
          const int skew = (col >> 5) & 3;
          uint4 v;
          v.x = w[(4 * chunk + 0) ^ skew];
          v.y = w[(4 * chunk + 1) ^ skew];
          v.z = w[(4 * chunk + 2) ^ skew];
          v.w = w[(4 * chunk + 3) ^ skew];
          store_streaming(col_out + (long long)(c0 + col) * rows + r0 + 16 * chunk, v);
        }
      } else
#endif
      {
#pragma unroll 4
        for (int cc = 0; cc < 16; ++cc) {
          const int col = 16 * warp + cc;
          store_streaming(col_out + (long long)(c0 + col) * rows + r0 + 4 * lane,
                          staged[col * 33 + (lane ^ ((col >> 5) & 3))]);
        }
      }
    }
#endif
#if DBIAS
    if (t < 128) {
      float total = 0.0f;
      for (int i = 0; i < 16; ++i) total += colsum[i][t];
      dbias_partial[(long long)row_tile * cols + c0 + t] = total;
    }
#endif
  } else {
    // Any shape: one element at a time, adjacent threads on adjacent columns.
    for (int e = t; e < 128 * 128; e += 256) {
      const int r = r0 + (e >> 7), c = c0 + (e & 127);
      if (r >= rows || c >= cols) continue;
      const long long offset = (long long)r * cols + c;
      float v = to_float(x[offset]);
#if DACT
      v *= dact(to_float(pre[offset]));
#endif
      amax_bits = max(amax_bits, abs_bits(v));
      const u8 q = u8(PACK(v * scale, 0.0f) & 0xFF);
#if ROWWISE
      row_out[offset] = q;
#endif
#if COLUMNWISE
      col_out[(long long)c * rows + r] = q;
#endif
    }
#if DBIAS
    if (t < 128 && c0 + t < cols) {
      float total = 0.0f;
      for (int r = r0; r < rows && r < r0 + 128; ++r) {
        float v = to_float(x[(long long)r * cols + c0 + t]);
#if DACT
        v *= dact(to_float(pre[(long long)r * cols + c0 + t]));
#endif
        total += v;
      }
      dbias_partial[(long long)row_tile * cols + c0 + t] = total;
    }
#endif
  }
#if AMAX
  amax_bits = block_max_u32(amax_bits, reduce32);
  if (t == 0 && amax_bits != 0) atomicMax(amax_out, amax_bits);
#endif
}
)";
  return {k.name(), k.name(), s.str(), {}};
}

KernelSource emit_cuda_dbias_reduce(ElemType output) {
  // The sum is kept in fp32 and rounded once, to nearest even, on the store.
  std::string store;
  switch (output) {
    case ElemType::fp32:
      store = "reinterpret_cast<float*>(dbias)[c] = total;";
      break;
    case ElemType::bf16:
      store =
          "u16 b; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(b) : \"f\"(total)); "
          "reinterpret_cast<u16*>(dbias)[c] = b;";
      break;
    case ElemType::fp16:
      store =
          "u16 h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(total)); "
          "reinterpret_cast<u16*>(dbias)[c] = h;";
      break;
    default:
      throw std::invalid_argument("dbias_reduce: output must be fp32, bf16 or fp16");
  }
  const std::string name = DbiasReduceKernel{output}.name();
  const std::string source = cuda_prelude() + R"(
// dbias[c] = sum over tiles, in tile order, of the per-tile column sums.
extern "C" __global__ void __launch_bounds__(256)
)" + name + R"((void* __restrict__ dbias, const float* __restrict__ partial, int tiles, int cols) {
  const int c = blockIdx.x * 256 + threadIdx.x;
  if (c >= cols) return;
  float total = 0.0f;
  for (int i = 0; i < tiles; ++i) total += partial[(long long)i * cols + c];
  )" + store + R"(
}
)";
  return {name, name, source, {}};
}

std::string DbiasReduceKernel::name() const {
  return output == ElemType::fp32 ? std::string("dbias_reduce")
                                  : "dbias_reduce_" + std::string(to_string(output));
}

KernelSource emit_cuda(const DbiasReduceKernel& kernel) {
  return emit_cuda_dbias_reduce(kernel.output);
}

}  // namespace fp8c
