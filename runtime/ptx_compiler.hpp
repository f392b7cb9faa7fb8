// PTX to CUBIN in process, for kernels whose backend writes PTX (the LLVM
// backend, codegen/backends/llvm): nvJitLink from the CUDA toolkit, loaded
// at run time (libnvJitLink.so.13) like NVRTC. It runs ptxas's code
// generator without a driver or a GPU, so CI assembles every LLVM-built
// kernel too.
#pragma once

#include <string>

#include "runtime/nvrtc.hpp"

namespace fp8c::runtime {

// The library and its version, e.g. "nvJitLink 13.0"; throws Unavailable
// naming the library names tried.
std::string ptx_compiler_version();

// Assembles `ptx` (one module, entry kernel `entry`) for `arch` (e.g.
// "sm_90a") at -O3. The result reads as NVRTC's does: the CUBIN, the log,
// the time, and the entry's registers and spills (from ptxas's -v report,
// and from the cubin). Throws std::runtime_error with nvJitLink's log when
// the PTX does not assemble; Unavailable when nvJitLink cannot be loaded.
NvrtcOutput compile_ptx_to_cubin(const std::string& ptx, const std::string& name,
                                 const std::string& entry, const std::string& arch);

}  // namespace fp8c::runtime
