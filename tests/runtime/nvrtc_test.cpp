// NVRTC needs no GPU: these run everywhere the CUDA toolkit is installed,
// which the project requires (README).
#include "runtime/nvrtc.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace fp8c::runtime {
namespace {

const char* kScale = R"(
extern "C" __global__ void scale(float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
)";

TEST(Nvrtc, LoadsAndReportsVersion) {
  const NvrtcApi& api = nvrtc();
  EXPECT_GE(api.major, 12);
  EXPECT_FALSE(api.soname.empty());
}

TEST(Nvrtc, CompilesToCubinForHopper) {
  const NvrtcOutput out = compile_to_cubin(kScale, "scale.cu", "scale", "sm_90a", {});
  ASSERT_GE(out.cubin.size(), 4u);
  EXPECT_EQ(std::memcmp(out.cubin.data(),
                        "\x7f"
                        "ELF",
                        4),
            0)
      << "a CUBIN is an ELF file";
  EXPECT_GT(out.registers, 0) << out.log;
  EXPECT_EQ(out.spill_stores, 0);
  EXPECT_EQ(out.spill_loads, 0);
  EXPECT_GT(out.milliseconds, 0);
}

TEST(Nvrtc, CompileErrorCarriesTheLog) {
  try {
    compile_to_cubin("__global__ void broken( { }", "broken.cu", "broken", "sm_90a", {});
    FAIL() << "a syntax error must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.cu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("error"), std::string::npos) << e.what();
  }
}

TEST(Nvrtc, UnknownArchitectureIsAnError) {
  EXPECT_THROW(compile_to_cubin(kScale, "scale.cu", "scale", "sm_9000", {}), std::runtime_error);
}

}  // namespace
}  // namespace fp8c::runtime
