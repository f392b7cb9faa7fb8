#include "runtime/epilogue_launcher.hpp"

#include <stdexcept>
#include <string>

namespace fp8c::runtime {

EpilogueLauncher::EpilogueLauncher(const Jit& jit, const EpilogueKernel& kernel)
    : kernel_(kernel), loaded_(jit, emit_cuda(kernel)) {}

void EpilogueLauncher::launch(const EpilogueArgs& a, CUstream stream) const {
  const auto need = [&](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(kernel_.name() + ": missing argument " + what);
  };
  if (a.rows < 0 || a.cols < 0) throw std::invalid_argument(kernel_.name() + ": negative shape");
  if (a.rows == 0 || a.cols == 0) return;
  const EpilogueKernel& k = kernel_;
  need(a.x != 0, "x");
  need(a.out != 0, "out");
  need(!k.bias || a.bias != 0, "bias");
  need(!k.backward || k.activation == Activation::none || a.pre_activation != 0, "pre_activation");
  need(!k.fp8_output() || a.scale != 0, "scale");
  need(!k.store_pre || a.pre_activation_out != 0, "pre_activation_out");
  need(!k.amax || a.amax != 0, "amax");
  need(!k.dbias || a.dbias_partial != 0, "dbias_partial");
  const long long column_tiles = (a.cols + kEpilogueTileCols - 1) / kEpilogueTileCols;
  if (column_tiles > 65535)
    throw std::invalid_argument(kernel_.name() + ": more than 65535 column tiles");
  void* args[] = {const_cast<CUdeviceptr*>(&a.x),
                  const_cast<CUdeviceptr*>(&a.bias),
                  const_cast<CUdeviceptr*>(&a.pre_activation),
                  const_cast<CUdeviceptr*>(&a.scale),
                  const_cast<CUdeviceptr*>(&a.out),
                  const_cast<CUdeviceptr*>(&a.pre_activation_out),
                  const_cast<CUdeviceptr*>(&a.amax),
                  const_cast<CUdeviceptr*>(&a.dbias_partial),
                  const_cast<int*>(&a.rows),
                  const_cast<int*>(&a.cols)};
  const int tile_rows = epilogue_tile_rows(k);
  LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>((a.rows + tile_rows - 1) / tile_rows);
  shape.grid[1] = static_cast<unsigned>(column_tiles);
  shape.block[0] = kEpilogueThreads;
  runtime::launch(loaded_.function(), shape, stream, args);
}

}  // namespace fp8c::runtime
