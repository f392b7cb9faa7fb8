#include "runtime/block_quantize_launcher.hpp"

#include <stdexcept>

namespace fp8c::runtime {

BlockQuantizeLauncher::BlockQuantizeLauncher(const Jit& jit, const BlockQuantizeKernel& kernel)
    : kernel_(kernel),
      compiled_(jit.compile(emit_cuda(kernel))),
      module_(compiled_.cubin),
      function_(module_.function(compiled_.entry)) {}

LaunchShape block_quantize_launch_shape(int rows, int cols) {
  LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>((cols + 127) / 128);
  shape.grid[1] = static_cast<unsigned>((rows + 127) / 128);
  shape.block[0] = kBlockQuantizeThreads;
  shape.shared_bytes = kBlockQuantizeSharedBytes;
  return shape;
}

void BlockQuantizeLauncher::launch(const BlockQuantizeArgs& a, CUstream stream) const {
  const auto need = [&](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(kernel_.name() + ": missing argument " + what);
  };
  if (a.rows < 0 || a.cols < 0) throw std::invalid_argument(kernel_.name() + ": negative shape");
  need(a.x != 0, "x");
  need(!kernel_.rowwise || (a.rowwise != 0 && a.rowwise_scales != 0), "rowwise data/scales");
  need(!kernel_.columnwise || (a.columnwise != 0 && a.columnwise_scales != 0),
       "columnwise data/scales");
  const bool dact = kernel_.dact != Activation::none;
  need(!dact || a.pre_activation != 0, "pre_activation (dact)");
  void* args[] = {const_cast<CUdeviceptr*>(&a.x),
                  const_cast<CUdeviceptr*>(&a.rowwise),
                  const_cast<CUdeviceptr*>(&a.rowwise_scales),
                  const_cast<CUdeviceptr*>(&a.columnwise),
                  const_cast<CUdeviceptr*>(&a.columnwise_scales),
                  const_cast<int*>(&a.rows),
                  const_cast<int*>(&a.cols),
                  const_cast<CUdeviceptr*>(&a.pre_activation)};  // read with dact only
  runtime::launch(function_, block_quantize_launch_shape(a.rows, a.cols), stream, args);
}

}  // namespace fp8c::runtime
