#include "runtime/kernel_launchers.hpp"

#include <stdexcept>
#include <string>

namespace fp8c::runtime {

LoadedKernel::LoadedKernel(const Jit& jit, const KernelSource& source)
    : compiled_(jit.compile(source)),
      module_(compiled_.cubin),
      function_(module_.function(compiled_.entry)) {}

RingSumLauncher::RingSumLauncher(const Jit& jit, const RingSumKernel& kernel)
    : kernel_(kernel), loaded_(jit, emit_cuda(kernel)) {}

void RingSumLauncher::launch(CUdeviceptr sum_in, CUdeviceptr partial, CUdeviceptr out,
                             std::uint64_t count, bool last, CUstream stream) const {
  if (count == 0) return;
  if (partial == 0 || out == 0 || (last && sum_in == 0))
    throw std::invalid_argument(kernel_.name() + ": null buffer");
  int last_flag = last ? 1 : 0;
  unsigned long long n = count;
  void* args[] = {&sum_in, &partial, &out, &n, &last_flag};
  LaunchShape shape;
  // A few waves of the H200's 132 SMs; the loop strides over the rest.
  const std::uint64_t blocks = (count + kRingSumThreads - 1) / kRingSumThreads;
  shape.grid[0] = static_cast<unsigned>(blocks < 132 * 16 ? blocks : 132 * 16);
  shape.block[0] = kRingSumThreads;
  runtime::launch(loaded_.function(), shape, stream, args);
}

TransposeLauncher::TransposeLauncher(const Jit& jit, const TransposeKernel& kernel)
    : kernel_(kernel), loaded_(jit, emit_cuda(kernel)) {}

void TransposeLauncher::launch(CUdeviceptr in, CUdeviceptr out, int rows, int cols, CUstream stream,
                               int batch) const {
  if (rows < 0 || cols < 0 || batch < 0) throw std::invalid_argument("transpose: negative shape");
  if (batch > 1 && kernel_.element_bytes != 4)
    throw std::invalid_argument(kernel_.name() + ": only the word kernel takes a batch");
  if (batch > 65535) throw std::invalid_argument(kernel_.name() + ": a batch of more than 65535");
  if (rows == 0 || cols == 0 || batch == 0) return;
  if (in == 0 || out == 0) throw std::invalid_argument("transpose: null buffer");
  // Words are read and written as words; whole byte tiles (rows and cols
  // multiples of 16) as 16-byte vectors. Other byte shapes take the edge
  // path, which reads and writes single bytes at any address.
  const bool vectors = kernel_.element_bytes == 1 && rows % 16 == 0 && cols % 16 == 0;
  const std::uint64_t align = vectors ? 16 : static_cast<std::uint64_t>(kernel_.element_bytes);
  if ((in | out) % align != 0)
    throw std::invalid_argument(kernel_.name() + ": in and out must be " + std::to_string(align) +
                                "-byte aligned" +
                                (vectors ? " for a shape of multiples of 16" : ""));
  const int tile = transpose_tile(kernel_.element_bytes);
  // The grid's y extent is at most 65535 tiles.
  if ((rows + tile - 1) / tile > 65535)
    throw std::invalid_argument(kernel_.name() + ": " + std::to_string(rows) +
                                " rows, more than the launch grid covers");
  void* args[] = {&in, &out, &rows, &cols};
  LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>((cols + tile - 1) / tile);
  shape.grid[1] = static_cast<unsigned>((rows + tile - 1) / tile);
  shape.grid[2] = static_cast<unsigned>(batch);
  shape.block[0] = kTransposeThreads;
  runtime::launch(loaded_.function(), shape, stream, args);
}

PermuteLauncher::PermuteLauncher(const Jit& jit, const PermuteKernel& kernel)
    : kernel_(kernel), loaded_(jit, emit_cuda(kernel)) {}

void PermuteLauncher::launch(CUdeviceptr in, CUdeviceptr out, int ranks, int outer,
                             std::int64_t inner_local, CUstream stream) const {
  if (ranks < 1 || outer < 0 || inner_local < 0) throw std::invalid_argument("permute: bad shape");
  if (outer == 0 || inner_local == 0) return;
  // The kernel counts a row's units (bytes at worst) in a 32-bit signed
  // loop counter that steps 4 units per thread past them.
  if (static_cast<std::int64_t>(ranks) * inner_local * kernel_.element_bytes >
      0x7FFFFFFFll - 4 * kPermuteThreads)
    throw std::invalid_argument("permute: an output row of 2 GiB or more");
  if (in == 0 || out == 0) throw std::invalid_argument("permute: null buffer");
  long long inner = inner_local;
  void* args[] = {&in, &out, &ranks, &outer, &inner};
  LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>(outer);
  shape.block[0] = kPermuteThreads;
  runtime::launch(loaded_.function(), shape, stream, args);
}

ScaleUpdateLauncher::ScaleUpdateLauncher(const Jit& jit, const ScaleUpdateKernel& kernel)
    : kernel_(kernel), loaded_(jit, emit_cuda(kernel)) {}

void ScaleUpdateLauncher::launch(const ScaleUpdateArgs& a, CUstream stream) const {
  if (!a.history || !a.amax || !a.previous_scale || !a.scale || !a.scale_inv)
    throw std::invalid_argument(kernel_.name() + ": null buffer");
  if (kernel_.guard > 0 && !a.guard)
    throw std::invalid_argument(kernel_.name() + ": null NaN verdict (guard)");
  void* args[] = {const_cast<CUdeviceptr*>(&a.history),        const_cast<CUdeviceptr*>(&a.amax),
                  const_cast<CUdeviceptr*>(&a.previous_scale), const_cast<CUdeviceptr*>(&a.scale),
                  const_cast<CUdeviceptr*>(&a.scale_inv),      const_cast<CUdeviceptr*>(&a.guard)};
  LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>(kernel_.tensors());
  shape.block[0] = kScaleUpdateThreads;
  runtime::launch(loaded_.function(), shape, stream, args);
}

}  // namespace fp8c::runtime
