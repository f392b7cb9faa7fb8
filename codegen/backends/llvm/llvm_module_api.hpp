// The boundary between fp8c and its LLVM module, libfp8c_llvm.so, which
// holds LLVM's NVPTX backend (linked statically, about 27 MB) and fp8c's
// emitter (llvm_emitter.hpp). A module because LLVM is optional: the GPU
// machine and users who only want NVRTC have none, and no other binary of
// fp8c should grow by LLVM's size; llvm_backend.cpp opens it with dlopen
// (common/module_loader.hpp has the search order) when a kernel asks for
// the llvm backend.
//
// As with the gloo module (collectives/gloo_module.hpp), C++ types cross
// the boundary as they are: the module is built from the same sources by
// the same compiler, and the table carries the fp8c version and an ABI
// number so a module from another build is refused. Exceptions the module
// throws (std::invalid_argument, std::runtime_error) are standard types.
#pragma once

#include <cstdint>
#include <string>

#include "codegen/ir/ir.hpp"

namespace fp8c::llvm_backend::module_api {

// Bump when Api, ir::Kernel or anything else the two sides share changes shape.
inline constexpr std::uint32_t kAbiVersion = 1;
inline constexpr const char* kEntry = "fp8c_llvm_module_api";
inline constexpr const char* kFileName = "libfp8c_llvm.so";

struct Api {
  std::uint32_t abi_version;  // these two stay first in every ABI
  const char* fp8c_version;
  const char* llvm_version;  // LLVM_VERSION_STRING of the LLVM linked in
  std::string (*ptx)(const ir::Kernel& kernel, const std::string& cpu);
  std::string (*llvm_ir)(const ir::Kernel& kernel, const std::string& cpu, bool optimized);
};

using EntryFunction = const Api* (*)();

}  // namespace fp8c::llvm_backend::module_api
