// Transpose of a row-major [rows, cols] matrix of 1- or 4-byte elements into
// [cols, rows]. Bytes: the FP8 transpose of per-tensor scaled data (one scale
// for the whole tensor, so it carries over unchanged and only the bytes
// move), where the planner derives a columnwise copy from a rowwise one
// (chained inputs, gathered dY). Words: a 1x128 operand's fp32 block scales,
// [rows][ceil(K/128)] as the quantizers write them, into the K-block-major
// order cuBLASLt's block-scaled GEMM reads (codegen/lower).
#pragma once

#include <string>

#include "codegen/ir/ir.hpp"
#include "codegen/kernels/kernel_source.hpp"

namespace fp8c {

// Only the element size varies: any FP8 format is a byte, any scale a word.
struct TransposeKernel {
  int element_bytes = 1;  // 1 or 4
  std::string name() const { return element_bytes == 4 ? "transpose_u32" : "transpose_u8"; }
  bool operator==(const TransposeKernel&) const = default;
};

// One block of kTransposeThreads threads owns a square tile of
// transpose_tile(element_bytes) elements a side; launch grid =
// ceil(cols / tile) x ceil(rows / tile).
constexpr int transpose_tile(int element_bytes) {
  return element_bytes == 4 ? 32 : 128;
}
inline constexpr int kTransposeThreads = 256;

// Kernel arguments, in order: const void* in ([rows, cols]), void* out
// ([cols, rows]), int rows, int cols. The word kernel also transposes a batch
// of such matrices stored back to back, one per grid z index. build_ir
// (transpose_ir.cpp) throws std::invalid_argument for an element size other
// than 1 or 4; emit_cuda is its CUDA print.
ir::Kernel build_ir(const TransposeKernel& kernel);
KernelSource emit_cuda(const TransposeKernel& kernel);

}  // namespace fp8c
