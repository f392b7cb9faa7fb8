#include "runtime/dequantize_launcher.hpp"

#include <stdexcept>
#include <string>

namespace fp8c::runtime {

DequantizeLauncher::DequantizeLauncher(const Jit& jit, const DequantizeKernel& kernel)
    : kernel_(kernel), loaded_(jit, emit_cuda(kernel)) {}

void DequantizeLauncher::launch(const DequantizeArgs& a, CUstream stream) const {
  const std::string& name = kernel_.name();
  if (a.outer < 0 || a.inner < 0) throw std::invalid_argument(name + ": negative shape");
  if (a.segments < 1 || a.inner % a.segments != 0)
    throw std::invalid_argument(name + ": inner extent " + std::to_string(a.inner) +
                                " is not a whole number of " + std::to_string(a.segments) +
                                " segments");
  if (a.segmented && a.segments == 1) throw std::invalid_argument(name + ": one segment");
  if (a.outer == 0 || a.inner == 0) return;
  if (a.data == 0 || a.out == 0) throw std::invalid_argument(name + ": null buffer");
  if (kernel_.scaling == Scaling::per_tensor ? a.tensor_scale == 0 : a.block_scales == 0)
    throw std::invalid_argument(name + ": missing scales");
  if (kernel_.amax && a.amax == 0) throw std::invalid_argument(name + ": missing amax");
  const long long inner_tiles = (a.inner + kDequantizeTileInner - 1) / kDequantizeTileInner;
  if (inner_tiles > 65535) throw std::invalid_argument(name + ": inner extent too large");
  int segmented = a.segmented ? 1 : 0;
  int outer = a.outer, inner = a.inner, segments = a.segments;
  void* args[] = {const_cast<CUdeviceptr*>(&a.data),
                  const_cast<CUdeviceptr*>(&a.tensor_scale),
                  const_cast<CUdeviceptr*>(&a.block_scales),
                  const_cast<CUdeviceptr*>(&a.out),
                  const_cast<CUdeviceptr*>(&a.amax),
                  &outer,
                  &inner,
                  &segments,
                  &segmented};
  LaunchShape shape;
  shape.grid[0] =
      static_cast<unsigned>((a.outer + kDequantizeTileOuter - 1) / kDequantizeTileOuter);
  shape.grid[1] = static_cast<unsigned>(inner_tiles);
  shape.block[0] = kDequantizeThreads;
  runtime::launch(loaded_.function(), shape, stream, args);
}

}  // namespace fp8c::runtime
