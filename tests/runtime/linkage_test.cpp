// fp8c must load on a machine without a GPU driver: no binary of it may
// name libcuda, libnvrtc, libnccl or libcublasLt as a link-time dependency.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

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

void expect_no_cuda_library(const std::string& binary) {
  const std::string section = dynamic_section(binary);
  ASSERT_NE(section.find("NEEDED"), std::string::npos) << "readelf failed on " << binary << ":\n"
                                                       << section;
  for (const char* lib : {"libcuda", "libnvrtc", "libnccl", "libcublas", "libcudart"})
    EXPECT_EQ(section.find(lib), std::string::npos) << binary << " needs " << lib << ":\n"
                                                    << section;
}

TEST(Linkage, FpcToolHasNoCudaLibraryDependency) {
  expect_no_cuda_library(FP8C_TOOL_PATH);
}

TEST(Linkage, RuntimeTestsHaveNoCudaLibraryDependency) {
  expect_no_cuda_library(FP8C_SELF_PATH);
}

}  // namespace
