// The GPU the GPU tests share: device 0's context and a JIT for its
// architecture, created once per test binary. Without a driver, tests skip
// visibly with REQUIRE_GPU() and the reason.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "codegen/backends/llvm/llvm_backend.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"
#include "tests/llvm_module.hpp"

namespace fp8c::testing {

struct Gpu {
  std::unique_ptr<runtime::Device> device;
  std::unique_ptr<runtime::Jit> jit;       // backend = nvrtc
  std::unique_ptr<runtime::Jit> llvm_jit;  // backend = llvm (its own cache folder)
  const runtime::Jit& jit_for(KernelBackend backend) const {
    return backend == KernelBackend::llvm ? *llvm_jit : *jit;
  }
};

// Never destroyed: the context must outlive every test's buffers and modules.
inline Gpu& gpu() {
  static Gpu* instance = [] {
    auto* g = new Gpu;
    if (runtime::driver_available()) {
      g->device = std::make_unique<runtime::Device>(0);
      const auto dir = std::filesystem::temp_directory_path() / "fp8c-gpu-test-cache";
      g->jit = std::make_unique<runtime::Jit>(g->device->arch(), runtime::CubinCache(dir.string()));
      g->llvm_jit = std::make_unique<runtime::Jit>(
          g->device->arch(), runtime::CubinCache((dir / "llvm").string()), KernelBackend::llvm);
    }
    return g;
  }();
  return *instance;
}

}  // namespace fp8c::testing

// Also makes the shared device's context current on the test's thread, so a
// test may allocate before it first asks for gpu().
#define REQUIRE_GPU()                                                                      \
  do {                                                                                     \
    std::string reason;                                                                    \
    if (!::fp8c::runtime::driver_available(&reason)) GTEST_SKIP() << "no GPU: " << reason; \
    ::fp8c::testing::gpu().device->make_current();                                         \
  } while (0)

// A GPU, and for backend llvm the LLVM module.
#define REQUIRE_GPU_AND_BACKEND(backend)                                                 \
  do {                                                                                   \
    REQUIRE_GPU();                                                                       \
    if ((backend) == ::fp8c::KernelBackend::llvm && !::fp8c::llvm_backend::available())  \
      GTEST_SKIP() << "no LLVM backend: " << ::fp8c::llvm_backend::unavailable_reason(); \
  } while (0)
