#include "runtime/quantize_launcher.hpp"

#include <stdexcept>
#include <utility>

namespace fp8c::runtime {

QuantizeLauncher::QuantizeLauncher(const Jit& jit, const QuantizeKernel& kernel)
    : kernel_(kernel),
      compiled_(jit.compile(emit_cuda(kernel))),
      module_(compiled_.cubin),
      function_(module_.function(compiled_.entry)) {}

std::optional<std::string> quantize_alignment_problem(const QuantizeKernel& k,
                                                      const QuantizeArgs& a) {
  const bool vector_tiles = a.rows >= kQuantizeTile && a.cols >= kQuantizeTile && a.cols % 8 == 0 &&
                            (!k.columnwise || a.rows % 4 == 0);
  if (!vector_tiles) return std::nullopt;
  const auto misaligned = [](CUdeviceptr p, unsigned bytes) { return p != 0 && p % bytes != 0; };
  const auto problem = [&](const char* what, unsigned bytes) {
    return k.name() + ": " + what + " must be " + std::to_string(bytes) + "-byte aligned for a " +
           std::to_string(a.rows) + " x " + std::to_string(a.cols) +
           " tensor (whole tiles use vector accesses)";
  };
  if (misaligned(a.x, 16)) return problem("x", 16);
  if (k.dact != Activation::none && misaligned(a.pre_activation, 16))
    return problem("pre_activation", 16);
  if (k.rowwise && misaligned(a.rowwise, 8)) return problem("rowwise", 8);
  if (k.columnwise && misaligned(a.columnwise, 4)) return problem("columnwise", 4);
  return std::nullopt;
}

LaunchShape quantize_launch_shape(int rows, int cols) {
  const int row_tiles = QuantizeLauncher::tiles(rows), col_tiles = QuantizeLauncher::tiles(cols);
  LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>(col_tiles);
  shape.grid[1] = static_cast<unsigned>(row_tiles);
  shape.block[0] = kQuantizeThreads;
  return shape;
}

void QuantizeLauncher::launch(const QuantizeArgs& a, CUstream stream) const {
  const auto need = [&](bool condition, const char* what) {
    if (!condition)
      throw std::invalid_argument(kernel_.name() + ": missing argument " + std::string(what));
  };
  if (a.rows < 0 || a.cols < 0) throw std::invalid_argument(kernel_.name() + ": negative shape");
  need(a.x != 0, "x");
  need(!kernel_.rowwise || a.rowwise != 0, "rowwise");
  need(!kernel_.columnwise || a.columnwise != 0, "columnwise");
  need(!kernel_.amax || a.amax_out != 0, "amax_out");
  need(!kernel_.dbias || a.dbias_partial != 0, "dbias_partial");
  need(kernel_.dact == Activation::none || a.pre_activation != 0, "pre_activation");
  need(kernel_.scale_from_amax ? a.amax_in != 0 : a.scale != 0,
       kernel_.scale_from_amax ? "amax_in" : "scale");
  if (auto problem = quantize_alignment_problem(kernel_, a)) throw std::invalid_argument(*problem);
  void* args[] = {const_cast<CUdeviceptr*>(&a.x),
                  const_cast<CUdeviceptr*>(&a.pre_activation),
                  const_cast<CUdeviceptr*>(&a.scale),
                  const_cast<CUdeviceptr*>(&a.amax_in),
                  const_cast<CUdeviceptr*>(&a.rowwise),
                  const_cast<CUdeviceptr*>(&a.columnwise),
                  const_cast<CUdeviceptr*>(&a.amax_out),
                  const_cast<CUdeviceptr*>(&a.dbias_partial),
                  const_cast<CUdeviceptr*>(&a.scale_out),
                  const_cast<int*>(&a.rows),
                  const_cast<int*>(&a.cols)};
  runtime::launch(function_, quantize_launch_shape(a.rows, a.cols), stream, args);
}

DbiasReduceLauncher::DbiasReduceLauncher(const Jit& jit, ElemType output, int slices)
    : compiled_(jit.compile(emit_cuda(DbiasReduceKernel{output, slices}))),
      module_(compiled_.cubin),
      function_(module_.function(compiled_.entry)),
      slices_(slices) {}

void DbiasReduceLauncher::launch(CUdeviceptr dbias, CUdeviceptr partial, int tiles, int cols,
                                 CUstream stream) const {
  void* args[] = {&dbias, &partial, &tiles, &cols};
  LaunchShape shape;
  const int columns = 256 / slices_;  // per block
  shape.grid[0] = static_cast<unsigned>((cols + columns - 1) / columns);
  shape.block[0] = 256;
  runtime::launch(function_, shape, stream, args);
}

}  // namespace fp8c::runtime
