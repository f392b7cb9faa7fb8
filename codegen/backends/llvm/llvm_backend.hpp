// The LLVM backend as the rest of fp8c sees it: kernel IR in, PTX out,
// through the module libfp8c_llvm.so (llvm_module_api.hpp), loaded the
// first time it is asked for. A build or install without the module works
// as before with backend = nvrtc; asking for llvm there throws
// LlvmUnavailable naming the module and every place it was looked for.
#pragma once

#include <stdexcept>
#include <string>

#include "codegen/ir/ir.hpp"

namespace fp8c::llvm_backend {

class LlvmUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

bool available();
std::string unavailable_reason();  // empty when available
std::string module_path();         // where the module was loaded from; empty when none
std::string llvm_version();        // e.g. "19.1.7"; throws LlvmUnavailable

// `cpu`: e.g. "sm_90a". Throw LlvmUnavailable, or what the emitter throws
// (llvm_emitter.hpp).
std::string ptx(const ir::Kernel& kernel, const std::string& cpu);
std::string llvm_ir(const ir::Kernel& kernel, const std::string& cpu, bool optimized);

}  // namespace fp8c::llvm_backend
