// `fp8c verify --device gpu`: each layer of a spec run by the GPU executor
// (all ranks on one GPU, single-GPU multi-rank mode) and by the CPU
// reference executor on the same seeded data, the CPU's backward starting
// from the GPU's pre-activation; per rank and per step:
//   - the FP8 data and scales quantized from the step's own inputs (x, w,
//     and dy where it is quantized before any GEMM): bit for bit;
//   - y, z, dx, dw, dbias: element by element within a bound derived from
//     both sides' GEMM operands (captured): |dA||B| + |A||dB| for operands
//     that differ (an FP8 code of dz the GPU's fast act' put elsewhere, a
//     block-scaled operand the GPU dequantized to the layer dtype), both
//     fp32 accumulations, the sums over the group, the epilogue and the
//     stores (runtime/cpu/verify_bounds.hpp);
//   - the delayed-scaling state key by key: bit for bit, dz's within 2^-9
//     where the GPU evaluates GELU'/SiLU' with fast intrinsics;
//   - the accuracy contract itself: the GPU's assembled tensors against the
//     float64 reference within the CPU oracle's own bounds, and replicated
//     tensors identical on all ranks.
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
// reference, which every process runs whole (threads) with every rank's
// GPU pre-activation (all-gathered); summed outputs' bounds add every
// rank's GEMM difference (all-gathered). The float64 check needs every
// rank's results and is left to the CPU oracle (fp8c verify) and to the
// single-GPU multi-rank mode above.
cpu::VerifyReport verify_rank_on_gpu(const Spec& spec, const cpu::VerifyOptions& options,
                                     const Device& device, const Jit& jit,
                                     DeviceCommunicator& comm);

}  // namespace fp8c::runtime
