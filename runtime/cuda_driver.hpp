// The CUDA Driver API, loaded at run time. libcuda.so.1 is opened with
// dlopen and every entry point is fetched through cuGetProcAddress, so that
// each name resolves to the ABI version this file was compiled against
// (dlsym("cuMemAlloc") would return the legacy 32-bit v1 entry point).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

namespace fp8c::runtime {

// Entry points fp8c uses, each with the ABI version it is called with. The
// version is explicit because cuGetProcAddress returns the newest ABI at or
// below the version asked for, which need not be the prototype cuda.h
// declares: asking for cuCtxSynchronize at 13000 returns the v13000 entry
// point, which takes a context argument that the v2000 prototype does not
// pass. cuda_driver.cpp checks each (name, version) against cuda.h.
#define FP8C_DRIVER_FUNCTIONS(X)         \
  X(cuInit, 2000)                        \
  X(cuDriverGetVersion, 2020)            \
  X(cuGetErrorName, 6000)                \
  X(cuGetErrorString, 6000)              \
  X(cuDeviceGetCount, 2000)              \
  X(cuDeviceGet, 2000)                   \
  X(cuDeviceGetName, 2000)               \
  X(cuDeviceGetAttribute, 2000)          \
  X(cuDeviceTotalMem, 3020)              \
  X(cuDevicePrimaryCtxRetain, 7000)      \
  X(cuDevicePrimaryCtxRelease, 11000)    \
  X(cuCtxSetCurrent, 4000)               \
  X(cuCtxGetDevice, 2000)                \
  X(cuCtxGetCurrent, 4000)               \
  X(cuCtxSynchronize, 2000)              \
  X(cuModuleLoadData, 2000)              \
  X(cuModuleUnload, 2000)                \
  X(cuModuleGetFunction, 2000)           \
  X(cuFuncGetAttribute, 2020)            \
  X(cuFuncSetAttribute, 9000)            \
  X(cuLaunchKernel, 4000)                \
  X(cuLaunchKernelEx, 11060)             \
  X(cuOccupancyMaxActiveClusters, 11070) \
  X(cuMemAlloc, 3020)                    \
  X(cuMemFree, 3020)                     \
  X(cuMemAllocHost, 3020)                \
  X(cuMemFreeHost, 2000)                 \
  X(cuMemcpyHtoD, 3020)                  \
  X(cuMemcpyDtoH, 3020)                  \
  X(cuMemcpyDtoDAsync, 3020)             \
  X(cuMemcpyHtoDAsync, 3020)             \
  X(cuMemcpyDtoHAsync, 3020)             \
  X(cuMemcpy2DAsync, 3020)               \
  X(cuMemsetD8Async, 3020)               \
  X(cuMemGetInfo, 3020)                  \
  X(cuPointerGetAttribute, 4000)         \
  X(cuStreamCreate, 2000)                \
  X(cuStreamDestroy, 4000)               \
  X(cuStreamSynchronize, 2000)           \
  X(cuStreamQuery, 2000)                 \
  X(cuStreamWaitEvent, 3020)             \
  X(cuStreamBeginCapture, 10010)         \
  X(cuStreamEndCapture, 10000)           \
  X(cuStreamIsCapturing, 10000)          \
  X(cuGraphInstantiateWithFlags, 11040)  \
  X(cuGraphLaunch, 10000)                \
  X(cuGraphGetNodes, 10000)              \
  X(cuGraphDestroy, 10000)               \
  X(cuGraphExecDestroy, 10000)           \
  X(cuEventCreate, 2000)                 \
  X(cuEventDestroy, 4000)                \
  X(cuEventRecord, 2000)                 \
  X(cuEventQuery, 2000)                  \
  X(cuEventSynchronize, 2000)            \
  X(cuEventElapsedTime, 12080)           \
  X(cuTensorMapEncodeTiled, 12000)

struct DriverApi {
#define FP8C_DECLARE(name, version) PFN_##name##_v##version name = nullptr;
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
