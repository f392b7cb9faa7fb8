// `fp8c verify --device gpu`: each layer of a spec run by the GPU executor
// (all ranks on one GPU, single-GPU multi-rank mode) and by the CPU
// reference executor on the same seeded data, per rank and per step:
//   - the FP8 data and scales quantized from the step's own inputs (x, w,
//     and dy where it is quantized before any GEMM): bit for bit;
//   - y, dx, dw, dbias: relative error ||gpu - cpu|| / ||cpu|| within
//     Tolerances::reduction (cuBLASLt sums K products in another order, and
//     a gradient quantized from a GEMM result may land one FP8 step apart);
//   - the delayed-scaling state of x and w bit for bit, of gradients within
//     the same tolerance.
// docs/verify.md states the rules.
#pragma once

#include "fp8c/spec.hpp"
#include "runtime/cpu/verify.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {

cpu::VerifyReport verify_spec_on_gpu(const Spec& spec, const cpu::VerifyOptions& options,
                                     const Device& device, const Jit& jit);

}  // namespace fp8c::runtime
