// The boundary between fp8c and its gloo module, libfp8c_gloo.so.
//
// gloo is a shared library only (Debian ships no libgloo.a) and the GPU
// machine has none, so nothing that must start there may name libgloo.so.0
// as DT_NEEDED. The gloo backend therefore lives in a module of its own that
// gloo_communicator.cpp opens with dlopen the first time a gloo group is
// asked for; everything else of fp8c runs without it.
//
// The module exports one C symbol, kGlooModuleEntry, returning a table of
// C++ function pointers. C++ types (std::string, std::unique_ptr,
// Communicator, exceptions) cross the boundary as they are: the module is
// built from the same sources by the same compiler as the code that loads
// it, and the table carries the fp8c version and an ABI number so that a
// module from another build is refused instead of misread. The module keeps
// its own (hidden) copy of fp8c_collectives_core; objects it creates are used
// through their vtables, and exceptions it throws (CollectiveError) are
// caught by type name, which libstdc++ compares across shared objects.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "collectives/communicator.hpp"
#include "collectives/gloo_communicator.hpp"

namespace fp8c::collectives::gloo_module {

// Bump when Api, GlooOptions or anything the module and its loader share
// changes shape; the fp8c version is compared as well.
// 2: Communicator gained run_ring_shift (a new vtable slot).
inline constexpr std::uint32_t kAbiVersion = 2;

// What the module exports (extern "C", default visibility).
inline constexpr const char* kEntry = "fp8c_gloo_module_api";
inline constexpr const char* kFileName = "libfp8c_gloo.so";

// A gloo::rendezvous::Store, defined inside the module only.
struct Store;

// abi_version and fp8c_version stay the first two fields in every ABI, so a
// loader can read them from a module of any build and refuse it.
struct Api {
  std::uint32_t abi_version;
  const char* fp8c_version;  // PROJECT_VERSION of the build that made the module
  Store* (*in_memory_store)();
  Store* (*file_system_store)(const std::string& directory);
  void (*destroy_store)(Store* store) noexcept;
  // connect_gloo with validated arguments (see gloo_communicator.hpp).
  std::unique_ptr<Communicator> (*connect)(int rank, int size, Store& store,
                                           const GlooOptions& options);
};

using EntryFunction = const Api* (*)();

}  // namespace fp8c::collectives::gloo_module
