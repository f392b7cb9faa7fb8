// The check each kernel family's compile test makes (no GPU needed, so it
// runs in CI): every source compiles with NVRTC for sm_90a to a CUBIN, with
// registers reported and no spill, through a fresh cubin cache named
// `cache_name` in the temp folder (removed afterwards).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/jit.hpp"

namespace fp8c::testing {

inline void expect_compiles_without_spills(const std::vector<KernelSource>& sources,
                                           const std::string& cache_name) {
  const auto dir = std::filesystem::temp_directory_path() / cache_name;
  std::filesystem::remove_all(dir);
  const runtime::Jit jit("sm_90a", runtime::CubinCache(dir.string()));
  for (const auto& c : jit.compile_all(sources)) {
    EXPECT_FALSE(c.cubin.empty()) << c.name;
    EXPECT_GT(c.registers, 0) << c.name;
    EXPECT_EQ(c.spill_stores, 0) << c.name;
    EXPECT_EQ(c.spill_loads, 0) << c.name;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace fp8c::testing
