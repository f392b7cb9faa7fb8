// The check each kernel family's compile test makes (no GPU needed, so it
// runs in CI): every source compiles with NVRTC for sm_90a to a CUBIN, with
// registers reported and no spill, through a fresh cubin cache named
// `cache_name` in the temp folder (this process's own; removed afterwards).
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/jit.hpp"

namespace fp8c::testing {

// A folder of this process's own in the temp folder: a fixed name was shared
// by every test process of the machine (two builds' test runs at once), and
// one run's remove_all pulled the cache from under the other's compile.
inline std::filesystem::path process_temp_dir(const std::string& name) {
  // Appended to, not `name + "-" + ...`, which GCC 12 at -O3 flags with a
  // false -Wrestrict.
  std::string folder = name;
  folder += '-';
  folder += std::to_string(getpid());
  return std::filesystem::temp_directory_path() / folder;
}

inline void expect_compiles_without_spills(const std::vector<KernelSource>& sources,
                                           const std::string& cache_name) {
  const auto dir = process_temp_dir(cache_name);
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
