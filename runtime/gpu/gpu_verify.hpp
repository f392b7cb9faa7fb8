// `fp8c verify --device gpu`: each layer of a spec run by the GPU executor
// (all ranks on one GPU, single-GPU multi-rank mode) and by the CPU
// reference executor on the same seeded data, per rank and per step:
//   - the FP8 data and scales quantized from the step's own inputs (x, w,
//     and dy where it is quantized before any GEMM): bit for bit;
//   - y: relative error ||gpu - cpu|| / ||cpu|| within Tolerances::reduction
//     (only the GEMM's summation order differs);
//   - dx, dw, dbias: the same, or, for a layer with an activation, twice the
//     float64 bound: dz = dy * act'(z) with z a GEMM result, and a z one
//     rounding apart can put dz on the next FP8 code (the CPU oracle's rule
//     for N ranks vs 1 where quantized values may differ);
//   - the delayed-scaling state of x and w bit for bit, of gradients within
//     the reduction tolerance;
//   - the accuracy contract itself: the GPU's assembled y, dx, dw, dbias
//     against the float64 reference within the CPU oracle's own bounds, and
//     replicated tensors identical on all ranks.
// docs/verify.md states the rules.
#pragma once

#include "fp8c/spec.hpp"
#include "runtime/cpu/verify.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {

cpu::VerifyReport verify_spec_on_gpu(const Spec& spec, const cpu::VerifyOptions& options,
                                     const Device& device, const Jit& jit);

class DeviceCommunicator;

// One process per GPU (NCCL): this process runs its own rank, planned for
// comm.size() ranks, and compares it with the same rank of the CPU
// reference, which every process runs whole (threads). The float64 check
// needs every rank's results and is left to the CPU oracle (fp8c verify)
// and to the single-GPU multi-rank mode above.
cpu::VerifyReport verify_rank_on_gpu(const Spec& spec, const cpu::VerifyOptions& options,
                                     const Device& device, const Jit& jit,
                                     DeviceCommunicator& comm);

}  // namespace fp8c::runtime
