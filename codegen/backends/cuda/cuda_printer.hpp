// The kernel IR as CUDA C++ for NVRTC: one self-contained source (no
// #include) with the kernel as an extern "C" __global__ function.
//
// The IR's semantics (codegen/ir/ir.hpp) are kept by what is printed: f32
// addition and multiplication print as __fadd_rn, __fsub_rn, __fmul_rn,
// which NVRTC never fuses into an FMA (Op::fma prints __fmaf_rn), and f32
// division as inline div.rn.f32, which no -prec-div, -ftz or fast math
// changes, so the source needs no option of its own and batches with any
// other kernel. The PTX-only
// operations (FP8 packs, the approximate math, streaming stores) print as
// inline asm, the same instructions the LLVM backend emits.
//
// With `for_host`, the source is for fp8c's CPU emulation of kernels
// (tests/emulation/cuda_host.hpp): the inline asm becomes calls to the
// host twins declared there, and each __shared__ array becomes a reference
// to a namespace-scope array the harness poisons before every block.
#pragma once

#include <string>

#include "codegen/ir/ir.hpp"

namespace fp8c::cuda {

std::string print(const ir::Kernel& kernel, bool for_host = false);

}  // namespace fp8c::cuda
