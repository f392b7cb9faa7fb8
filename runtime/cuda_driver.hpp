// The CUDA Driver API, loaded at run time. libcuda.so.1 is opened with
// dlopen and every entry point is fetched through cuGetProcAddress, so that
// each name resolves to the ABI version this file was compiled against
// (dlsym("cuMemAlloc") would return the legacy 32-bit v1 entry point).
#pragma once

#include <cuda.h>

#include <string>

namespace fp8c::runtime {

// Entry points fp8c uses. Their types come from cuda.h's prototypes, which
// name the current ABI (cuMemAlloc is cuMemAlloc_v2 there).
#define FP8C_DRIVER_FUNCTIONS(X) \
  X(cuInit)                      \
  X(cuDriverGetVersion)          \
  X(cuGetErrorName)              \
  X(cuGetErrorString)            \
  X(cuDeviceGetCount)            \
  X(cuDeviceGet)                 \
  X(cuDeviceGetName)             \
  X(cuDeviceGetAttribute)        \
  X(cuDeviceTotalMem)            \
  X(cuDevicePrimaryCtxRetain)    \
  X(cuDevicePrimaryCtxRelease)   \
  X(cuCtxSetCurrent)             \
  X(cuCtxSynchronize)            \
  X(cuModuleLoadData)            \
  X(cuModuleUnload)              \
  X(cuModuleGetFunction)         \
  X(cuFuncGetAttribute)          \
  X(cuFuncSetAttribute)          \
  X(cuLaunchKernel)              \
  X(cuMemAlloc)                  \
  X(cuMemFree)                   \
  X(cuMemcpyHtoD)                \
  X(cuMemcpyDtoH)                \
  X(cuMemcpyDtoDAsync)           \
  X(cuMemcpyHtoDAsync)           \
  X(cuMemcpyDtoHAsync)           \
  X(cuMemsetD8Async)             \
  X(cuMemGetInfo)                \
  X(cuStreamCreate)              \
  X(cuStreamDestroy)             \
  X(cuStreamSynchronize)         \
  X(cuStreamWaitEvent)           \
  X(cuEventCreate)               \
  X(cuEventDestroy)              \
  X(cuEventRecord)               \
  X(cuEventQuery)                \
  X(cuEventSynchronize)          \
  X(cuEventElapsedTime)

struct DriverApi {
#define FP8C_DECLARE(name) decltype(&::name) name = nullptr;
  FP8C_DRIVER_FUNCTIONS(FP8C_DECLARE)
#undef FP8C_DECLARE
  int driver_version = 0;  // e.g. 13000 for a CUDA 13.0 driver
};

// Loads libcuda once and calls cuInit(0). Throws Unavailable (with the reason:
// no libcuda, a stub library, no device, a driver older than fp8c needs).
const DriverApi& driver();

// Whether driver() would succeed; never throws. The reason is stored when not.
bool driver_available(std::string* reason = nullptr);

// Throws std::runtime_error naming the call and CUDA's error name and text.
void check(CUresult result, const char* call);

#define FP8C_CU(call) ::fp8c::runtime::check((call), #call)

}  // namespace fp8c::runtime
