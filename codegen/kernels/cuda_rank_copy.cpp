// The CUDA C++ printer for RankCopyKernel.
//
// Block (x, y, z) owns the copy sources[z] -> destinations[y] + z * stride.
// The unit is picked per copy from the alignment of both addresses and the
// length, so device allocations and whole-tensor blocks move as 16-byte
// vectors while odd offsets still work byte by byte.

#include "codegen/kernels/cuda_prelude.hpp"
#include "codegen/kernels/rank_copy.hpp"
#include "codegen/kernels/rank_reduce.hpp"

namespace fp8c {

KernelSource emit_cuda(const RankCopyKernel& k) {
  std::string s = cuda_prelude();
  s += "#define MAX_RANKS " + std::to_string(kRankMaxRanks) + "\n";
  s += R"(struct RankPointers { u64 p[MAX_RANKS]; };

template <typename Unit>
__device__ __forceinline__ void copy_units(u64 from, u64 to, u64 bytes) {
  const Unit* __restrict__ src = reinterpret_cast<const Unit*>(from);
  Unit* __restrict__ dst = reinterpret_cast<Unit*>(to);
  const u64 units = bytes / sizeof(Unit);
  const u64 step = u64(gridDim.x) * blockDim.x;
  for (u64 u = u64(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += step) dst[u] = src[u];
}

extern "C" __global__ void __launch_bounds__()";
  s += std::to_string(kRankCopyThreads) + ")\n" + k.name();
  s += R"((RankPointers sources, RankPointers destinations, u64 bytes, u64 destination_stride) {
  const u64 from = sources.p[blockIdx.z];
  const u64 to_base = destinations.p[blockIdx.y];
  if (from == 0 || to_base == 0) return;
  const u64 to = to_base + u64(blockIdx.z) * destination_stride;
  if (from == to) return;  // an in-place rank's own block
  const u64 alignment = from | to | bytes;
  if ((alignment & 15) == 0) copy_units<uint4>(from, to, bytes);
  else if ((alignment & 7) == 0) copy_units<uint2>(from, to, bytes);
  else if ((alignment & 3) == 0) copy_units<u32>(from, to, bytes);
  else if ((alignment & 1) == 0) copy_units<u16>(from, to, bytes);
  else copy_units<u8>(from, to, bytes);
}
)";
  return {k.name(), k.name(), std::move(s), {}};
}

}  // namespace fp8c
