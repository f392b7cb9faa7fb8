// The CUDA C++ printer for TransposeKernel.
//
// Fast path (a whole 128x128 tile, rows and cols multiples of 16): thread t
// loads 16 bytes from each of 4 adjacent rows (16-byte loads, 8 threads per
// 128-byte row segment), turns the 4x16 bytes into 16 column words of 4 rows
// each with byte permutes, and stages them in shared memory as
// [128 columns][32 words]. Each output column is then 128 contiguous bytes,
// which 8 threads store as 16-byte vectors. The 16-byte chunks of a column
// row are XOR-swizzled by the column's 16-column group, so both the word
// writes and the vector reads hit 32 distinct banks.
// Other tiles (edges, unaligned shapes) go through a byte tile in shared
// memory: coalesced byte loads along rows, coalesced byte stores along
// columns. Correct for any shape, a few times slower.
//
// Words (block scales, a few MB at most): the textbook 32x32 tile through
// shared memory padded to 33 columns, so both the row reads and the column
// writes are coalesced and conflict-free; a batch of matrices (one per rank
// segment) in one launch, one per blockIdx.z.

#include <stdexcept>
#include <string>

#include "codegen/kernels/cuda_prelude.hpp"
#include "codegen/kernels/transpose.hpp"

namespace fp8c {
namespace {

KernelSource emit_word_transpose(const TransposeKernel& k) {
  std::string s = cuda_prelude();
  s += "\nextern \"C\" __global__ void __launch_bounds__(256)\n";
  s += k.name();
  s += R"((const u32* __restrict__ in, u32* __restrict__ out, int rows, int cols) {
  __shared__ u32 tile[32][33];
  // blockIdx.z: one matrix of a batch stored back to back (rank segments).
  const long long batch = (long long)blockIdx.z * rows * cols;
  in += batch;
  out += batch;
  const int x = threadIdx.x & 31, y = threadIdx.x >> 5;
  const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
#pragma unroll
  for (int i = y; i < 32; i += 8)
    if (r0 + i < rows && c0 + x < cols) tile[i][x] = in[(long long)(r0 + i) * cols + c0 + x];
  __syncthreads();
#pragma unroll
  for (int i = y; i < 32; i += 8)
    if (c0 + i < cols && r0 + x < rows) out[(long long)(c0 + i) * rows + r0 + x] = tile[x][i];
}
)";
  return {k.name(), k.name(), std::move(s), {}};
}

}  // namespace

KernelSource emit_cuda(const TransposeKernel& k) {
  if (k.element_bytes == 4) return emit_word_transpose(k);
  if (k.element_bytes != 1)
    throw std::invalid_argument("transpose: " + std::to_string(k.element_bytes) +
                                "-byte elements (the kernel moves 1- or 4-byte ones)");
  std::string s = cuda_prelude();
  s += R"(
// The four bytes b of x0..x3 (byte b of each word) as one word, x0 lowest:
// a 4x4 byte transpose in 8 permutes.
__device__ __forceinline__ void transpose4x4(u32 x0, u32 x1, u32 x2, u32 x3, u32 out[4]) {
  const u32 lo01 = __byte_perm(x0, x1, 0x5140), hi01 = __byte_perm(x0, x1, 0x7362);
  const u32 lo23 = __byte_perm(x2, x3, 0x5140), hi23 = __byte_perm(x2, x3, 0x7362);
  out[0] = __byte_perm(lo01, lo23, 0x5410);
  out[1] = __byte_perm(lo01, lo23, 0x7632);
  out[2] = __byte_perm(hi01, hi23, 0x5410);
  out[3] = __byte_perm(hi01, hi23, 0x7632);
}

// Word w of a vector; w is a constant after unrolling, so this stays in
// registers where indexing through a pointer could put v in local memory.
__device__ __forceinline__ u32 word(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

extern "C" __global__ void __launch_bounds__(256)
)";
  s += k.name();
  s += R"((const u8* __restrict__ in, u8* __restrict__ out, int rows, int cols) {
  // Fast path: [128 columns][32 words]; edge path: [128 rows][132 bytes].
  __shared__ __align__(16) u32 staged[128 * 33];
  const int t = threadIdx.x;
  const int r0 = blockIdx.y * 128, c0 = blockIdx.x * 128;
  const bool fast = r0 + 128 <= rows && c0 + 128 <= cols && (rows & 15) == 0 && (cols & 15) == 0;
  if (fast) {
    const int g = t & 7, q = t >> 3;  // 16-column group, 4-row group
    uint4 v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      v[i] = *reinterpret_cast<const uint4*>(in + (long long)(r0 + 4 * q + i) * cols + c0 + 16 * g);
    // Column c's row word q lives in 16-byte chunk (q / 4) ^ (c / 16).
    const int slot = (((q >> 2) ^ g) << 2) | (q & 3);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      u32 col[4];
      transpose4x4(word(v[0], w), word(v[1], w), word(v[2], w), word(v[3], w), col);
#pragma unroll
      for (int b = 0; b < 4; ++b) staged[(16 * g + 4 * w + b) * 32 + slot] = col[b];
    }
    __syncthreads();
    const int chunk = t & 7;  // 16 rows of the output column
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = (t >> 3) + 32 * i;
      const uint4 word = *reinterpret_cast<const uint4*>(&staged[c * 32 + ((chunk ^ (c >> 4)) << 2)]);
      *reinterpret_cast<uint4*>(out + (long long)(c0 + c) * rows + r0 + 16 * chunk) = word;
    }
    return;
  }
  u8* tile = reinterpret_cast<u8*>(staged);
  const int tile_rows = min(128, rows - r0), tile_cols = min(128, cols - c0);
  for (int i = t; i < 128 * 128; i += 256) {
    const int r = i >> 7, c = i & 127;
    if (r < tile_rows && c < tile_cols) tile[r * 132 + c] = in[(long long)(r0 + r) * cols + c0 + c];
  }
  __syncthreads();
  for (int i = t; i < 128 * 128; i += 256) {
    const int c = i >> 7, r = i & 127;
    if (r < tile_rows && c < tile_cols) out[(long long)(c0 + c) * rows + r0 + r] = tile[r * 132 + c];
  }
}
)";
  return {k.name(), k.name(), std::move(s), {}};
}

}  // namespace fp8c
