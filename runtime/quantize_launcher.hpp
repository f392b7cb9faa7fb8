// A compiled, loaded QuantizeKernel and how to launch it. Shared by the GPU
// executor, the GPU tests and the benchmarks, so all three run the same code.
#pragma once

#include <optional>
#include <string>

#include "codegen/kernels/quantize.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {

struct QuantizeArgs {
  CUdeviceptr x = 0;
  CUdeviceptr pre_activation = 0;  // dact only
  CUdeviceptr scale = 0;           // delayed: the scale to apply
  CUdeviceptr amax_in = 0;         // current: the reduced amax (float) to scale from
  CUdeviceptr rowwise = 0;
  CUdeviceptr columnwise = 0;
  CUdeviceptr amax_out = 0;       // float bits, atomically maxed: zero it first
  CUdeviceptr dbias_partial = 0;  // [tiles(rows)][cols] floats
  CUdeviceptr scale_out = 0;      // current (optional): [0] the scale used, [4] its inverse
  int rows = 0;
  int cols = 0;
};

// Whole tiles take the vector path (16-byte loads, 8-byte rowwise and 4-byte
// columnwise stores) when cols % 8 == 0 (and rows % 4 == 0 with columnwise
// output); there x and pre must be 16-byte aligned, rowwise 8-byte and
// columnwise 4-byte aligned. The reason they are not, or nothing. (The
// kernel does not check: a misaligned vector access faults the context.)
std::optional<std::string> quantize_alignment_problem(const QuantizeKernel& kernel,
                                                      const QuantizeArgs& args);

// The grid and block a quantize kernel launches with for a rows x cols tensor (what
// launch() uses; the CPU emulation runs the same grid).
LaunchShape quantize_launch_shape(int rows, int cols);

class QuantizeLauncher {
 public:
  QuantizeLauncher(const Jit& jit, const QuantizeKernel& kernel);

  const QuantizeKernel& kernel() const { return kernel_; }
  const CompiledKernel& compiled() const { return compiled_; }

  // Checks the arguments the description needs are there, then launches.
  void launch(const QuantizeArgs& args, CUstream stream) const;

  // (Not (extent + 127) / 128: that overflows for extents near INT_MAX.)
  static int tiles(int extent) { return extent / kQuantizeTile + (extent % kQuantizeTile != 0); }

 private:
  QuantizeKernel kernel_;
  CompiledKernel compiled_;
  Module module_;
  CUfunction function_;
};

// dbias = the sum of dbias_partial's `tiles` rows, in order, stored as `output`.
class DbiasReduceLauncher {
 public:
  // `slices`: DbiasReduceKernel's (1: the quantize and epilogue kernels' order).
  explicit DbiasReduceLauncher(const Jit& jit, ElemType output = ElemType::fp32, int slices = 1);
  void launch(CUdeviceptr dbias, CUdeviceptr partial, int tiles, int cols, CUstream stream) const;
  const CompiledKernel& compiled() const { return compiled_; }

 private:
  CompiledKernel compiled_;
  Module module_;
  CUfunction function_;
  int slices_;
};

}  // namespace fp8c::runtime
