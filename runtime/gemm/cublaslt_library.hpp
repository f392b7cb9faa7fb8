// cuBLASLt, loaded at run time like every CUDA library fp8c uses
// (runtime/dynamic_library.hpp): cublasLt.h gives the prototypes, dlopen
// gives the code, nothing links against libcublasLt. The library loads
// without a GPU (its version can be read on a CPU machine); creating a
// handle needs one.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <string>
#include <vector>

namespace fp8c::runtime {

// Every entry point fp8c calls, each typed from cublasLt.h's prototype.
#define FP8C_CUBLASLT_FUNCTIONS(X)        \
  X(cublasLtGetVersion)                   \
  X(cublasLtGetStatusName)                \
  X(cublasLtGetStatusString)              \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmul)

struct CublasLtApi {
#define FP8C_DECLARE(name) decltype(&::name) name = nullptr;
  FP8C_CUBLASLT_FUNCTIONS(FP8C_DECLARE)
#undef FP8C_DECLARE
  std::string soname;
  // cublasLtGetVersion(): major * 10000 + minor * 100 + patch (130100 for 13.1.0).
  std::size_t version = 0;
};

// FP8C_CUBLASLT_LIBRARY when set (a soname or a path, e.g. a pip wheel's
// libcublasLt.so.12), else libcublasLt.so.13 then libcublasLt.so.12.
std::vector<std::string> default_cublaslt_sonames();

// Opens the first of `sonames` that loads and resolves every function.
// Throws Unavailable naming libcublasLt, each name tried and why it failed.
CublasLtApi load_cublaslt(const std::vector<std::string>& sonames);

// load_cublaslt(default_cublaslt_sonames()), once per process.
const CublasLtApi& cublaslt();

// Throws std::runtime_error naming `call` and cuBLASLt's status name and text.
void check_cublaslt(const CublasLtApi& api, cublasStatus_t status, const char* call);

}  // namespace fp8c::runtime
