// Compiled, loaded TransposeKernel, PermuteKernel, ScaleUpdateKernel and RingSumKernel and
// how to launch them; shared by the executor, the GPU tests and benchmarks.
// All pointers are device pointers.
#pragma once

#include <cstdint>

#include "codegen/kernels/permute.hpp"
#include "codegen/kernels/ring_sum.hpp"
#include "codegen/kernels/scale_update.hpp"
#include "codegen/kernels/transpose.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {

// A kernel compiled and loaded into the current context.
class LoadedKernel {
 public:
  LoadedKernel(const Jit& jit, const KernelSource& source);
  const CompiledKernel& compiled() const { return compiled_; }
  CUfunction function() const { return function_; }

 private:
  CompiledKernel compiled_;
  Module module_;
  CUfunction function_;
};

class RingSumLauncher {
 public:
  RingSumLauncher(const Jit& jit, const RingSumKernel& kernel);
  const RingSumKernel& kernel() const { return kernel_; }
  // One step of a ring reduce-scatter's chain over `count` elements
  // (codegen/kernels/ring_sum.hpp): out (fp32) = sum_in + partial, or
  // out (the partials' type) = the sum rounded once where `last`.
  void launch(CUdeviceptr sum_in, CUdeviceptr partial, CUdeviceptr out, std::uint64_t count,
              bool last, CUstream stream) const;

 private:
  RingSumKernel kernel_;
  LoadedKernel loaded_;
};

class TransposeLauncher {
 public:
  explicit TransposeLauncher(const Jit& jit, const TransposeKernel& kernel = {});
  const TransposeKernel& kernel() const { return kernel_; }
  const CompiledKernel& compiled() const { return loaded_.compiled(); }
  // out ([cols, rows] elements) = transpose of in ([rows, cols] elements);
  // with batch > 1 (the word kernel only), each of `batch` such matrices
  // stored back to back. Throws std::invalid_argument for pointers the
  // kernel cannot access: words need 4-byte alignment, bytes of a shape in
  // multiples of 16 need 16 (others: any).
  void launch(CUdeviceptr in, CUdeviceptr out, int rows, int cols, CUstream stream,
              int batch = 1) const;

 private:
  TransposeKernel kernel_;
  LoadedKernel loaded_;
};

class PermuteLauncher {
 public:
  PermuteLauncher(const Jit& jit, const PermuteKernel& kernel);
  const PermuteKernel& kernel() const { return kernel_; }
  const CompiledKernel& compiled() const { return loaded_.compiled(); }
  // out [outer][ranks * inner_local] from in [ranks][outer][inner_local] (elements).
  void launch(CUdeviceptr in, CUdeviceptr out, int ranks, int outer, std::int64_t inner_local,
              CUstream stream) const;

 private:
  PermuteKernel kernel_;
  LoadedKernel loaded_;
};

struct ScaleUpdateArgs {
  CUdeviceptr history = 0;         // [tensors][history_length] floats, updated in place
  CUdeviceptr amax = 0;            // [tensors] floats, already MAX-reduced over the group
  CUdeviceptr previous_scale = 0;  // [tensors]; may equal scale
  CUdeviceptr scale = 0;           // [tensors]
  CUdeviceptr scale_inv = 0;       // [tensors]
  CUdeviceptr guard = 0;           // [kernel.guard] floats, when the kernel has a guard
};

class ScaleUpdateLauncher {
 public:
  ScaleUpdateLauncher(const Jit& jit, const ScaleUpdateKernel& kernel);
  const ScaleUpdateKernel& kernel() const { return kernel_; }
  const CompiledKernel& compiled() const { return loaded_.compiled(); }
  void launch(const ScaleUpdateArgs& args, CUstream stream) const;

 private:
  ScaleUpdateKernel kernel_;
  LoadedKernel loaded_;
};

}  // namespace fp8c::runtime
