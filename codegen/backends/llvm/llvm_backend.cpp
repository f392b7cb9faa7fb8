#include "codegen/backends/llvm/llvm_backend.hpp"

#include "codegen/backends/llvm/llvm_module_api.hpp"
#include "common/module_loader.hpp"

namespace fp8c::llvm_backend {
namespace {

// Decided once per process, like the gloo module.
const LoadedModule& module() {
  static const LoadedModule loaded = [] {
    const ModuleSpec spec{module_api::kFileName, module_api::kEntry, "FP8C_LLVM_MODULE",
                          "fp8c: the LLVM backend (backend = llvm)", module_api::kAbiVersion};
    return load_module(spec,
                       "build fp8c with LLVM 19 installed (scripts/setup.sh installs llvm-19-dev), "
                       "set FP8C_LLVM_MODULE to the module's path, or use backend = nvrtc");
  }();
  return loaded;
}

const module_api::Api& api() {
  const LoadedModule& loaded = module();
  if (loaded.table == nullptr) throw LlvmUnavailable(loaded.error);
  return *static_cast<const module_api::Api*>(loaded.table);
}

}  // namespace

bool available() {
  return module().table != nullptr;
}

std::string unavailable_reason() {
  return module().error;
}

std::string module_path() {
  return module().path;
}

std::string llvm_version() {
  return api().llvm_version;
}

std::string ptx(const ir::Kernel& kernel, const std::string& cpu) {
  return api().ptx(kernel, cpu);
}

std::string llvm_ir(const ir::Kernel& kernel, const std::string& cpu, bool optimized) {
  return api().llvm_ir(kernel, cpu, optimized);
}

}  // namespace fp8c::llvm_backend
