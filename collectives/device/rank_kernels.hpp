// The single-GPU group's kernels, compiled and loaded: one RankReduceKernel
// per reducible dtype and op, and the batched RankCopyKernel. All pointers
// are device pointers of the current context.
#pragma once

#include <cstdint>
#include <vector>

#include "codegen/kernels/rank_copy.hpp"
#include "codegen/kernels/rank_reduce.hpp"
#include "collectives/dtype.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {

// The kernels' RankPointers parameter, byte for byte.
struct RankPointerTable {
  CUdeviceptr p[kRankMaxRanks] = {};
};
static_assert(sizeof(RankPointerTable) == 8 * kRankMaxRanks);

// The kernel description for a reducible collectives dtype and op; throws
// std::invalid_argument for FP8.
RankReduceKernel rank_reduce_kernel(ElemType dtype, collectives::ReduceOp op);

// Every variant the group may need: 6 element types x 2 ops.
std::vector<RankReduceKernel> all_rank_reduce_kernels();

class RankKernels {
 public:
  // Compiles every kernel (in parallel, through the JIT's cache) and loads
  // them into the context current on the calling thread.
  explicit RankKernels(const Jit& jit);

  // outputs[j][i] = reduction over r < ranks of inputs[r][j * input_stride + i],
  // for j < output_count and i < count (elements of dtype).
  void reduce(ElemType dtype, collectives::ReduceOp op, const RankPointerTable& inputs, int ranks,
              std::uint64_t input_stride, const RankPointerTable& outputs, int output_count,
              std::uint64_t count, CUstream stream) const;

  // For y < destination_count, z < source_count: copies `bytes` from
  // sources[z] to destinations[y] + z * destination_stride, skipping copies
  // onto themselves and null pointers.
  void copy(const RankPointerTable& sources, int source_count, const RankPointerTable& destinations,
            int destination_count, std::uint64_t bytes, std::uint64_t destination_stride,
            CUstream stream) const;

 private:
  struct Loaded {
    CompiledKernel compiled;
    Module module;
    CUfunction function;
  };
  std::vector<Loaded> reduce_;  // in all_rank_reduce_kernels() order
  std::vector<Loaded> copy_;    // one
};

}  // namespace fp8c::runtime
