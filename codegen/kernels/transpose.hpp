// FP8 transpose: rowwise [rows, cols] bytes -> columnwise [cols, rows], for
// per-tensor scaled data (one scale for the whole tensor, so it carries over
// unchanged and only the bytes move). The planner uses it where a columnwise
// copy is derived from a rowwise one (chained inputs, gathered dY).
#pragma once

#include <string>

#include "codegen/kernels/kernel_source.hpp"

namespace fp8c {

// Nothing varies yet: the kernel moves bytes and any FP8 format is a byte.
// A struct all the same, so the plan, the launchers and the tests handle it
// like every other kernel description.
struct TransposeKernel {
  std::string name() const { return "transpose_u8"; }
  bool operator==(const TransposeKernel&) const = default;
};

// One block of kTransposeThreads threads owns a kTransposeTile square tile;
// launch grid = ceil(cols / tile) x ceil(rows / tile).
inline constexpr int kTransposeTile = 128;
inline constexpr int kTransposeThreads = 256;

// Kernel arguments, in order: const u8* in ([rows, cols]), u8* out ([cols, rows]),
// int rows, int cols.
KernelSource emit_cuda(const TransposeKernel& kernel);

}  // namespace fp8c
