// A compiled, loaded DequantizeKernel and how to launch it; shared by the
// GPU executor, the GPU tests and benchmarks. All pointers are device
// pointers.
#pragma once

#include "codegen/kernels/dequantize.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"
#include "runtime/kernel_launchers.hpp"

namespace fp8c::runtime {

struct DequantizeArgs {
  CUdeviceptr data = 0;  // FP8 codes: [outer][inner], or [segments][outer][inner / segments]
  // per_tensor: one float, the quantizer's multiplier s (the plan's
  // "*.scale_inv" tensor holds s); the kernel applies 1 / s.
  CUdeviceptr tensor_scale = 0;
  CUdeviceptr block_scales = 0;  // block / MX scalings: the scale tensor (dequantize.hpp)
  CUdeviceptr out = 0;           // [outer][inner], or [inner][outer] with transpose
  CUdeviceptr amax = 0;          // with amax: float bits, atomically maxed: zero it first
  int outer = 0;                 // the data's physical extents, all segments together
  int inner = 0;
  // Gathered along the inner dim over this many ranks: blocks restart at each
  // rank's segment. 1 for data that was not gathered along its inner dim.
  int segments = 1;
  bool segmented = false;  // still stored segment by segment (not permuted)
};

class DequantizeLauncher {
 public:
  DequantizeLauncher(const Jit& jit, const DequantizeKernel& kernel);

  const DequantizeKernel& kernel() const { return kernel_; }
  const CompiledKernel& compiled() const { return loaded_.compiled(); }

  // Checks the arguments and the layout, then launches; an empty shape
  // launches nothing.
  void launch(const DequantizeArgs& args, CUstream stream) const;

 private:
  DequantizeKernel kernel_;
  LoadedKernel loaded_;
};

}  // namespace fp8c::runtime
