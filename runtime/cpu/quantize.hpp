// FP8 quantization and decoding of a plan tensor on the CPU, for every
// scaling the planner emits: per-tensor (one fp32 scale), 1x128 and 128x128
// blocks with fp32 or power-of-two scales, MXFP8 1x32 blocks with E8M0
// scales. Blocks lie in the tensor's physical (usage) order; a block at the
// edge of a dim that is not a multiple of the block size is a partial block
// (its amax and scale cover only the elements that exist).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codegen/numerics/fp8.hpp"
#include "runtime/cpu/tensor_store.hpp"

namespace fp8c::cpu {

struct QuantizeStats {
  float amax = 0.0f;
  std::uint64_t underflows = 0;  // non-zero values that became zero
  std::uint64_t overflows = 0;   // values clamped to the format's max
};

// Quantizes `logical` ([dims[0]][dims[1]] of tensor `id`) into FP8 tensor
// `id` in its usage, writing its block scales (when it has any) as well.
// Per-tensor scaling multiplies by `scale`; block scales come from each
// block's amax (`pow2`: rounded down to a power of two).
QuantizeStats quantize_to(TensorStore& store, int id, std::span<const float> logical, float scale,
                          bool pow2);

// FP8 tensor `id` (any usage, segmented or not) as logical floats
// [dims[0]][dims[1]]: block scales applied; the per-tensor scale applied only
// when `apply_tensor_scale` (a GEMM applies it to its result instead).
std::vector<float> decode(const TensorStore& store, int id, bool apply_tensor_scale);

// Copies FP8 rowwise data of `from` into columnwise `to` (per-tensor only).
void transpose_fp8(TensorStore& store, int from, int to);

// out[c][r] = in[r][c] for a rows x cols matrix of bytes (FP8 codes).
void transpose_bytes(std::span<const std::uint8_t> in, std::size_t rows, std::size_t cols,
                     std::span<std::uint8_t> out);

}  // namespace fp8c::cpu
