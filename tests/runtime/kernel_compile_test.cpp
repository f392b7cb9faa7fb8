// Every generated kernel compiles with NVRTC for sm_90a with no register
// spills. NVRTC needs no GPU, so this runs in CI.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "kernel_variants.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {
namespace {

TEST(KernelCompile, EveryQuantizeVariantCompilesWithoutSpills) {
  std::vector<KernelSource> sources;
  std::set<std::string> names;
  for (const auto& k : testing::quantize_variants()) {
    sources.push_back(emit_cuda(k));
    EXPECT_TRUE(names.insert(k.name()).second) << "two variants named " << k.name();
    EXPECT_EQ(sources.back().source.find("#include"), std::string::npos)
        << k.name() << " must be self-contained";
  }
  sources.push_back(emit_cuda_dbias_reduce());
  const auto dir = std::filesystem::temp_directory_path() / "fp8c-kernel-compile-test";
  std::filesystem::remove_all(dir);
  const Jit jit("sm_90a", CubinCache(dir.string()));
  const auto compiled = jit.compile_all(sources);
  for (const auto& c : compiled) {
    EXPECT_FALSE(c.cubin.empty()) << c.name;
    EXPECT_GT(c.registers, 0) << c.name;
    EXPECT_EQ(c.spill_stores, 0) << c.name;
    EXPECT_EQ(c.spill_loads, 0) << c.name;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp8c::runtime
