// The argument checks every DeviceCommunicator backend makes before it
// communicates, worded as collectives::Communicator words them. A refused
// call throws CollectiveError(kInvalidArgument); the backend then poisons
// itself, since its peers are about to run a collective this rank skips.
#pragma once

#include "collectives/collective_call.hpp"
#include "runtime/cuda_driver.hpp"

namespace fp8c::runtime {

// Valid dtype and op, no FP8 reduction, root in range, non-null buffers
// where count > 0 (broadcast's send only on the root), sizes that do not
// overflow, and no overlap of send and recv other than NCCL's in-place
// forms. `call.kind` selects the rules; kBarrier is accepted as is.
void check_device_call(const collectives::CollectiveCall& call, int rank, int size,
                       CUdeviceptr send, CUdeviceptr recv);

// Send and recv aligned to the element size: the single-GPU group's kernels
// load whole elements (NCCL itself accepts any address).
void check_element_alignment(const collectives::CollectiveCall& call, int rank, int size,
                             CUdeviceptr send, CUdeviceptr recv);

}  // namespace fp8c::runtime
