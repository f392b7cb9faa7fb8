// A test with a cubin cache of its own: an empty folder per test (named by
// process and test), removed afterwards, and a Jit that uses it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "runtime/jit.hpp"

namespace fp8c::testing {

class ScratchCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("fp8c-cache-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  runtime::Jit jit(const std::string& arch = "sm_90a",
                   KernelBackend backend = KernelBackend::nvrtc) const {
    return runtime::Jit(arch, runtime::CubinCache(dir_.string()), backend);
  }

  std::filesystem::path dir_;
};

}  // namespace fp8c::testing
