#include "runtime/cuda_driver.hpp"

#include <mutex>
#include <stdexcept>
#include <type_traits>

#include "runtime/dynamic_library.hpp"

namespace fp8c::runtime {
namespace {

// Each entry point's type is the prototype cuda.h declares for its name.
#define FP8C_CHECK_ABI(name, version)                                       \
  static_assert(std::is_same_v<PFN_##name##_v##version, decltype(&::name)>, \
                #name " is not called with the ABI version cuda.h declares");
FP8C_DRIVER_FUNCTIONS(FP8C_CHECK_ABI)
#undef FP8C_CHECK_ABI

// The oldest driver whose entry points have the ABI of the headers for every
// function in FP8C_DRIVER_FUNCTIONS.
constexpr int kMinimumDriverVersion = 12080;  // cuEventElapsedTime_v2

DriverApi load_driver() {
  // Never the toolkit's stubs/libcuda.so: it has the same soname and answers
  // cuInit with CUDA_ERROR_STUB_LIBRARY, which is reported below.
  const DynamicLibrary library = DynamicLibrary::open("the CUDA driver", {"libcuda.so.1"});
  using GetProcAddress =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  const auto get_proc = reinterpret_cast<GetProcAddress>(library.symbol("cuGetProcAddress_v2"));
  const auto get_version =
      reinterpret_cast<CUresult (*)(int*)>(library.symbol("cuDriverGetVersion"));

  DriverApi api;
  if (get_version(&api.driver_version) != CUDA_SUCCESS)
    throw Unavailable("the CUDA driver did not report its version");
  if (api.driver_version < kMinimumDriverVersion)
    throw Unavailable("the CUDA driver is version " + std::to_string(api.driver_version) +
                      "; fp8c needs " + std::to_string(kMinimumDriverVersion) + " or newer");
  const auto load = [&](const char* name, int version, auto& slot) {
    void* address = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const CUresult result = get_proc(name, &address, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (result != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !address)
      throw Unavailable(std::string("the CUDA driver has no entry point ") + name +
                        " for version " + std::to_string(version));
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(address);
  };
#define FP8C_LOAD(name, version) load(#name, version, api.name);
  FP8C_DRIVER_FUNCTIONS(FP8C_LOAD)
#undef FP8C_LOAD

  const CUresult init = api.cuInit(0);
  if (init == CUDA_ERROR_STUB_LIBRARY)
    throw Unavailable(
        "libcuda.so.1 is the CUDA toolkit's stub library, not a driver "
        "(is .../lib64/stubs on LD_LIBRARY_PATH?)");
  if (init == CUDA_ERROR_NO_DEVICE) throw Unavailable("the CUDA driver found no GPU");
  if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    api.cuGetErrorName(init, &name);
    throw Unavailable(std::string("cuInit failed: ") + (name ? name : "unknown error"));
  }
  int count = 0;
  if (api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
    throw Unavailable("the CUDA driver found no GPU");
  return api;
}

struct DriverState {
  std::once_flag once;
  DriverApi api;
  std::string error;  // set when loading failed
};

DriverState& state() {
  static DriverState s;
  std::call_once(s.once, [] {
    try {
      s.api = load_driver();
    } catch (const std::exception& e) {
      s.error = e.what();
    }
  });
  return s;
}

}  // namespace

const DriverApi& driver() {
  DriverState& s = state();
  if (!s.error.empty()) throw Unavailable(s.error);
  return s.api;
}

bool driver_available(std::string* reason) {
  DriverState& s = state();
  if (reason) *reason = s.error;
  return s.error.empty();
}

void check(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  std::string reason = std::to_string(static_cast<int>(result));
  if (driver_available()) {
    driver().cuGetErrorName(result, &name);
    driver().cuGetErrorString(result, &text);
    if (name) reason = std::string(name) + (text ? std::string(": ") + text : "");
  }
  throw std::runtime_error(std::string(call) + " failed: " + reason);
}

}  // namespace fp8c::runtime
