// The argument checks every backend makes before it communicates, host and
// device alike, so that all of them refuse the same calls with the same
// words. A refused call throws CollectiveError(kInvalidArgument) naming the
// call; the backend then poisons itself, since its peers are about to run a
// collective this rank skips.
#pragma once

#include <cstdint>

#include "collectives/collective_call.hpp"

namespace fp8c::collectives {

// A buffer's address as a number: a host pointer (through std::uintptr_t)
// or a CUdeviceptr. Only compared and offset, never dereferenced.
using BufferAddress = std::uint64_t;

// Valid dtype and op, no FP8 reduction, root in range, non-null buffers
// where count > 0 (broadcast's send only on the root), sizes that do not
// overflow, and no overlap of send and recv other than NCCL's in-place
// forms (ring_shift has none: its send and recv must be disjoint).
// `call.kind` selects the rules; kBarrier is accepted as is.
void check_call_arguments(const CollectiveCall& call, int rank, int size, BufferAddress send,
                          BufferAddress recv);

// Send and recv aligned to the element size, for backends whose kernels load
// whole elements (the single-GPU group; NCCL itself accepts any address).
void check_element_alignment(const CollectiveCall& call, int rank, int size, BufferAddress send,
                             BufferAddress recv);

}  // namespace fp8c::collectives
