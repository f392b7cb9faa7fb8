// Batched device copies for the single-GPU multi-rank communicator
// (collectives/device/local_device_group): one launch moves every block of an
// all_gather (ranks x ranks blocks) or a broadcast (ranks blocks) instead of
// one copy call per block.
#pragma once

#include <string>

#include "codegen/kernels/kernel_source.hpp"

namespace fp8c {

// Bytes are bytes: nothing varies. A struct all the same, like
// TransposeKernel, so launchers and tests treat it like every kernel.
struct RankCopyKernel {
  std::string name() const { return "rank_copy"; }
  bool operator==(const RankCopyKernel&) const = default;
};

inline constexpr int kRankCopyThreads = 256;

// Kernel arguments, in order:
//   RankPointers sources            (see rank_reduce.hpp: 64 device pointers)
//   RankPointers destinations
//   unsigned long long bytes        per block
//   unsigned long long destination_stride   bytes
// Block (x, y, z) copies `bytes` from sources[z] to destinations[y] + z *
// destination_stride, grid-striding over x. A block whose source and
// destination are the same address (an in-place rank) or either is 0 is
// skipped. Each copy moves the widest unit (16, 8, 4, 2 or 1 bytes) that
// divides both addresses and the length.
KernelSource emit_cuda(const RankCopyKernel& kernel);

}  // namespace fp8c
