#include "runtime/gemm/cublaslt_library.hpp"

#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "runtime/dynamic_library.hpp"

namespace fp8c::runtime {

std::vector<std::string> default_cublaslt_sonames() {
  if (const char* chosen = std::getenv("FP8C_CUBLASLT_LIBRARY"); chosen && *chosen) return {chosen};
  // 13 first: the headers fp8c builds with. 12 (from 12.9 on) has the same
  // ABI for everything listed in FP8C_CUBLASLT_FUNCTIONS.
  return {"libcublasLt.so.13", "libcublasLt.so.12"};
}

CublasLtApi load_cublaslt(const std::vector<std::string>& sonames) {
  const DynamicLibrary library = DynamicLibrary::open("cuBLASLt (libcublasLt)", sonames);
  CublasLtApi api;
  api.soname = library.soname();
#define FP8C_LOAD(name) api.name = reinterpret_cast<decltype(&::name)>(library.symbol(#name));
  FP8C_CUBLASLT_FUNCTIONS(FP8C_LOAD)
#undef FP8C_LOAD
  api.version = api.cublasLtGetVersion();
  return api;
}

const CublasLtApi& cublaslt() {
  static std::once_flag once;
  static CublasLtApi api;
  static std::string error;
  std::call_once(once, [] {
    try {
      api = load_cublaslt(default_cublaslt_sonames());
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw Unavailable(error);
  return api;
}

void check_cublaslt(const CublasLtApi& api, cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const char* name = api.cublasLtGetStatusName ? api.cublasLtGetStatusName(status) : nullptr;
  const char* text = api.cublasLtGetStatusString ? api.cublasLtGetStatusString(status) : nullptr;
  std::string reason = name ? name : "status " + std::to_string(static_cast<int>(status));
  if (text) reason += std::string(": ") + text;
  throw std::runtime_error(std::string(call) + " failed: " + reason);
}

}  // namespace fp8c::runtime
