// A compiled, loaded BlockQuantizeKernel and how to launch it.
#pragma once

#include "codegen/kernels/block_quantize.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {

struct BlockQuantizeArgs {
  CUdeviceptr x = 0;
  CUdeviceptr rowwise = 0;
  CUdeviceptr rowwise_scales = 0;
  CUdeviceptr columnwise = 0;
  CUdeviceptr columnwise_scales = 0;
  int rows = 0;
  int cols = 0;
  CUdeviceptr pre_activation = 0;  // with dact only: [rows, cols] in x's type
};

// The grid and block a block quantize kernel launches with for a rows x cols
// tensor (what launch() uses; the CPU emulation runs the same grid).
LaunchShape block_quantize_launch_shape(int rows, int cols);

class BlockQuantizeLauncher {
 public:
  BlockQuantizeLauncher(const Jit& jit, const BlockQuantizeKernel& kernel);
  const BlockQuantizeKernel& kernel() const { return kernel_; }
  const CompiledKernel& compiled() const { return compiled_; }
  void launch(const BlockQuantizeArgs& args, CUstream stream) const;

 private:
  BlockQuantizeKernel kernel_;
  CompiledKernel compiled_;
  Module module_;
  CUfunction function_;
};

}  // namespace fp8c::runtime
