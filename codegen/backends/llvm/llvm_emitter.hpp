// The kernel IR as LLVM IR for the NVPTX target, and that as PTX: built in
// process with llvm::IRBuilder, verified, optimized by LLVM's O3 pipeline
// (with NVPTX's own passes) and printed by the NVPTX backend.
//
// Only the LLVM module (libfp8c_llvm.so, llvm_module.cpp) compiles this
// file, so nothing else of fp8c links LLVM; the rest reaches it through
// codegen/backends/llvm/llvm_backend.hpp.
//
// Lowering, where LLVM 19 has the operation: NVVM intrinsics (special
// registers, bar.sync, shfl.sync, fma, ctlz, min/max) and plain IR (integer
// and IEEE float arithmetic with no fast-math flags, so nothing is
// contracted or flushed, as the IR's semantics say). Where it has none
// (the FP8 packs, the 16-bit float conversions, prmt, the approximate math,
// streaming stores), inline PTX with the instruction the CUDA printer's
// inline asm has, so both backends run the same instruction. Loads through
// a read-only restrict parameter carry !invariant.load (ld.global.nc, as
// NVRTC gives a const __restrict__ pointer).
#pragma once

#include <string>

#include "codegen/ir/ir.hpp"

namespace fp8c::llvm_backend {

// `cpu`: the GPU, e.g. "sm_90a". Throws std::invalid_argument for IR the
// emitter cannot lower, std::runtime_error when LLVM's verifier or backend
// refuses the module (with LLVM's message).
std::string emit_llvm_ir(const ir::Kernel& kernel, const std::string& cpu, bool optimized);
std::string emit_ptx(const ir::Kernel& kernel, const std::string& cpu);

}  // namespace fp8c::llvm_backend
