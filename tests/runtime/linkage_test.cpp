// fp8c must load on the GPU machine, which has neither a GPU driver on every
// host nor gloo: no binary users run (the `fp8c` tool, libfp8c.so) may name
// libcuda, libnvrtc, libnccl, libcublasLt or libgloo as a link-time
// dependency (DT_NEEDED). CUDA libraries are opened with dlopen; gloo lives
// in the module libfp8c_gloo.so, also opened with dlopen.
#include <gtest/gtest.h>

#include <filesystem>

#include <array>
#include <cstdio>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>
#include "tests/test_paths.hpp"

namespace {

std::string dynamic_section(const std::string& binary) {
  std::string out;
  FILE* p = popen(("readelf -d '" + binary + "' 2>&1").c_str(), "r");
  if (!p) return out;
  std::array<char, 512> buffer;
  while (fgets(buffer.data(), buffer.size(), p)) out += buffer.data();
  pclose(p);
  return out;
}

// The (NEEDED) lines only: a library's own SONAME or RUNPATH may mention
// anything.
std::vector<std::string> needed(const std::string& binary) {
  const std::string section = dynamic_section(binary);
  std::vector<std::string> lines;
  std::istringstream in(section);
  for (std::string line; std::getline(in, line);)
    if (line.find("(NEEDED)") != std::string::npos) lines.push_back(line);
  EXPECT_FALSE(lines.empty()) << "readelf found no NEEDED entry in " << binary << ":\n" << section;
  return lines;
}

bool needs(const std::vector<std::string>& lines, const std::string& library) {
  for (const auto& line : lines)
    if (line.find("[" + library) != std::string::npos) return true;
  return false;
}

const std::initializer_list<const char*> kCuda = {"libcuda", "libnvrtc", "libnccl", "libcublas",
                                                  "libcudart"};

void expect_none_of(const std::string& binary, std::initializer_list<const char*> libraries) {
  const auto lines = needed(binary);
  for (const char* library : libraries) {
    EXPECT_FALSE(needs(lines, library)) << binary << " needs " << library << ":\n"
                                        << ::testing::PrintToString(lines);
  }
}

// The binaries are checked where they were built; a test binary carried to
// another machine (the GPU one) says so instead of failing on a missing file.
#define REQUIRE_BUILT(path)                                                                 \
  do {                                                                                      \
    if (!std::filesystem::exists(path))                                                     \
      GTEST_SKIP() << path << " is not on this machine (these tests were built elsewhere)"; \
  } while (0)

TEST(Linkage, FpcToolNeedsNoCudaLibraryAndNoGloo) {
  REQUIRE_BUILT(::fp8c::testing::built_path(FP8C_TOOL_PATH));
  expect_none_of(::fp8c::testing::built_path(FP8C_TOOL_PATH), kCuda);
  expect_none_of(::fp8c::testing::built_path(FP8C_TOOL_PATH), {"libgloo", "libfp8c_gloo"});
}

TEST(Linkage, SharedLibraryNeedsNoCudaLibraryAndNoGloo) {
  REQUIRE_BUILT(::fp8c::testing::built_path(FP8C_LIBRARY_PATH));
  expect_none_of(::fp8c::testing::built_path(FP8C_LIBRARY_PATH), kCuda);
  expect_none_of(::fp8c::testing::built_path(FP8C_LIBRARY_PATH), {"libgloo", "libfp8c_gloo"});
}

TEST(Linkage, RuntimeTestsHaveNoCudaLibraryDependency) {
  REQUIRE_BUILT(::fp8c::testing::built_path(FP8C_SELF_PATH));
  expect_none_of(::fp8c::testing::built_path(FP8C_SELF_PATH), kCuda);
}

// The module is where gloo went: it needs libgloo (so the checks above would
// see it if it leaked back) and nothing of CUDA.
TEST(Linkage, GlooModuleNeedsGlooAndNoCudaLibrary) {
  REQUIRE_BUILT(::fp8c::testing::built_path(FP8C_GLOO_MODULE_PATH));
  EXPECT_TRUE(needs(needed(::fp8c::testing::built_path(FP8C_GLOO_MODULE_PATH)), "libgloo"));
  expect_none_of(::fp8c::testing::built_path(FP8C_GLOO_MODULE_PATH), kCuda);
}

// LLVM is optional and the GPU machine has none: only the LLVM module holds
// it, linked in statically, so the module loads where no LLVM is installed.
TEST(Linkage, NothingButTheLlvmModuleHoldsLlvm) {
  for (const char* binary : {FP8C_TOOL_PATH, FP8C_LIBRARY_PATH, FP8C_SELF_PATH}) {
    REQUIRE_BUILT(::fp8c::testing::built_path(binary));
    expect_none_of(::fp8c::testing::built_path(binary), {"libLLVM", "libfp8c_llvm"});
  }
#ifdef FP8C_LLVM_MODULE_PATH
  const std::string module = ::fp8c::testing::built_path(FP8C_LLVM_MODULE_PATH);
  REQUIRE_BUILT(module);
  expect_none_of(module, {"libLLVM"});
  expect_none_of(module, kCuda);
#else
  GTEST_SKIP() << "this build has no LLVM module (LLVM 19 was not found)";
#endif
}

}  // namespace
