// libfp8c_llvm.so's one export (llvm_module_api.hpp).
#include <llvm/Config/llvm-config.h>

#include "codegen/backends/llvm/llvm_emitter.hpp"
#include "codegen/backends/llvm/llvm_module_api.hpp"

namespace {

const fp8c::llvm_backend::module_api::Api kApi = {
    fp8c::llvm_backend::module_api::kAbiVersion,
    FP8C_VERSION,
    LLVM_VERSION_STRING,
    &fp8c::llvm_backend::emit_ptx,
    &fp8c::llvm_backend::emit_llvm_ir,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const fp8c::llvm_backend::module_api::Api*
fp8c_llvm_module_api() {
  return &kApi;
}
