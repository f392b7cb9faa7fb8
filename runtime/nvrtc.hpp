// NVRTC, loaded at run time (libnvrtc.so.13). NVRTC needs no GPU and no
// driver, so kernels compile on any machine with the library: CI checks every
// generated kernel this way.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

namespace fp8c::runtime {

#define FP8C_NVRTC_FUNCTIONS(X) \
  X(nvrtcVersion)               \
  X(nvrtcGetErrorString)        \
  X(nvrtcCreateProgram)         \
  X(nvrtcDestroyProgram)        \
  X(nvrtcCompileProgram)        \
  X(nvrtcGetProgramLogSize)     \
  X(nvrtcGetProgramLog)         \
  X(nvrtcGetCUBINSize)          \
  X(nvrtcGetCUBIN)              \
  X(nvrtcGetPTXSize)            \
  X(nvrtcGetPTX)

struct NvrtcApi {
#define FP8C_DECLARE(name) decltype(&::name) name = nullptr;
  FP8C_NVRTC_FUNCTIONS(FP8C_DECLARE)
#undef FP8C_DECLARE
  int major = 0;
  int minor = 0;
  std::string soname;
};

// Loads NVRTC once. Throws Unavailable naming the libraries tried.
const NvrtcApi& nvrtc();

struct NvrtcOutput {
  std::vector<char> cubin;  // empty when compilation failed
  std::string log;          // NVRTC's and ptxas's messages
  double milliseconds = 0;
  int registers = -1;         // from the cubin; -1 if it could not be read (see the log)
  long long stack_frame = 0;  // bytes per thread, from the cubin
  // Spill bytes from ptxas -v; -1 when ptxas did not report them (NVRTC served
  // the compile from its cache) and the kernel has a stack frame to spill to.
  int spill_stores = -1;
  int spill_loads = -1;
  bool resources_in_log = false;
};

// Entry `entry`'s resources in a compiled program: registers and stack
// frame from the cubin, spills from ptxas's -v report in `log` (a program
// of several `entries` charges each for the functions that are none of
// them). The log's text is not copied; `log` in the result holds only a
// note when the cubin could not be read. Used by every PTX assembler.
NvrtcOutput entry_resources(const std::vector<char>& cubin, const std::string& log,
                            const std::string& entry, const std::vector<std::string>& entries);

// Compiles one CUDA C++ source to a CUBIN for `arch` (e.g. "sm_90a"), never
// to PTX only: embedded PTX would be JIT-compiled by the driver at load
// time, hiding both the cost and any ptxas error until then.
// Throws std::runtime_error with the log when compilation fails.
// `entry` is the kernel whose resources are reported.
NvrtcOutput compile_to_cubin(const std::string& source, const std::string& name,
                             const std::string& entry, const std::string& arch,
                             const std::vector<std::string>& options);

// One program holding several kernels (see runtime/kernel_batch.hpp): one
// CUBIN, and each entry's resources as compile_to_cubin reports them for a
// program of its own (spills of non-entry functions count for every entry).
struct NvrtcBatchOutput {
  std::vector<char> cubin;
  std::string log;
  double milliseconds = 0;
  std::vector<NvrtcOutput> entries;  // resources only (no cubin), in `entries` order
};
NvrtcBatchOutput compile_batch_to_cubin(const std::string& source, const std::string& name,
                                        const std::vector<std::string>& entries,
                                        const std::string& arch,
                                        const std::vector<std::string>& options);

}  // namespace fp8c::runtime
