// Points the LLVM backend at this build's module. A test binary does not
// sit where common/module_loader.hpp looks (next to libfp8c.so or the
// executable, then ../lib), so FP8C_LLVM_MODULE is set, once, before any
// test asks for the backend, to the module the build made (found as
// tests/test_paths.hpp finds the build's programs, so a carried build
// finds its own copy). An FP8C_LLVM_MODULE already set is left alone.
// Builds without LLVM define no FP8C_LLVM_MODULE_PATH: the backend then
// says it is unavailable, and the tests that need it skip saying why.
#pragma once

#include <cstdlib>
#include <filesystem>

#include "tests/test_paths.hpp"

namespace fp8c::testing {

inline bool use_built_llvm_module() {
#ifdef FP8C_LLVM_MODULE_PATH
  const char* set = std::getenv("FP8C_LLVM_MODULE");
  if (set && *set) return true;
  const std::string path = built_path(FP8C_LLVM_MODULE_PATH);
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) setenv("FP8C_LLVM_MODULE", path.c_str(), 0);
#endif
  return true;
}

// Dynamic initialisation of every binary that includes this header, before main().
inline const bool kBuiltLlvmModuleChosen = use_built_llvm_module();

}  // namespace fp8c::testing
