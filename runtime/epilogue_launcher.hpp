// A compiled, loaded EpilogueKernel and how to launch it; shared by the GPU
// executor, the GPU tests and benchmarks. All pointers are device pointers.
#pragma once

#include "codegen/kernels/epilogue.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"
#include "runtime/kernel_launchers.hpp"

namespace fp8c::runtime {

struct EpilogueArgs {
  CUdeviceptr x = 0;                   // forward: the input [rows][cols]; backward: dy
  CUdeviceptr bias = 0;                // forward with bias: [cols], the input type
  CUdeviceptr pre_activation = 0;      // backward with dact: z [rows][cols]
  CUdeviceptr scale = 0;               // FP8 output: one float, the multiplier (plan: y.scale_inv)
  CUdeviceptr out = 0;                 // forward: y [rows][cols]; backward: v [rows][cols]
  CUdeviceptr pre_activation_out = 0;  // forward with store_pre: z [rows][cols]
  CUdeviceptr amax = 0;                // with amax: float bits, atomically maxed: zero it first
  CUdeviceptr dbias_partial = 0;       // backward with dbias: [dbias_tiles(rows)][cols] floats
  int rows = 0;
  int cols = 0;
};

class EpilogueLauncher {
 public:
  EpilogueLauncher(const Jit& jit, const EpilogueKernel& kernel);

  const EpilogueKernel& kernel() const { return kernel_; }
  const CompiledKernel& compiled() const { return loaded_.compiled(); }

  // Checks that the arguments the description needs are there, then
  // launches; an empty shape launches nothing.
  void launch(const EpilogueArgs& args, CUstream stream) const;

  // Rows of dbias_partial; DbiasReduceLauncher (quantize_launcher.hpp) adds
  // them in order into the [cols] fp32 dbias.
  static int dbias_tiles(int rows) {
    return (rows + kEpilogueDbiasTileRows - 1) / kEpilogueDbiasTileRows;
  }

 private:
  EpilogueKernel kernel_;
  LoadedKernel loaded_;
};

}  // namespace fp8c::runtime
