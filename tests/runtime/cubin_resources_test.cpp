// Registers and stack frame read from the cubin agree with what ptxas -v
// prints when it runs (always on a machine without a driver, where NVRTC has
// no cache), and broken cubins are refused with a message.
#include "runtime/cubin_resources.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "runtime/nvrtc.hpp"

namespace fp8c::runtime {
namespace {

// Two kernels of different sizes in one cubin, so a reader that took the
// wrong function's record would be caught. `spilling` keeps 96 live values
// under a 32-register cap: ptxas must spill them to the stack frame.
const char* kTwoKernels = R"(
extern "C" __global__ void small(float* x) { x[threadIdx.x] += 1.0f; }
extern "C" __global__ void spilling(float* x, int n) {
  float a[96];
#pragma unroll
  for (int k = 0; k < 96; ++k) a[k] = x[k * n + threadIdx.x];
  float s = 0;
#pragma unroll
  for (int k = 0; k < 96; ++k) s += a[k] * a[(k * 7) % 96];
#pragma unroll
  for (int k = 0; k < 96; ++k) x[k * n + threadIdx.x] = a[k] * s;
}
)";

// ptxas -v's numbers for `entry`: {registers, stack frame bytes}.
std::pair<int, long long> from_log(const std::string& log, const std::string& entry) {
  const std::regex block(
      "Function properties for " + entry +
      R"(\s+ptxas\s+\.\s+(\d+) bytes stack frame[^\n]*\n[^\n]*Used (\d+) registers)");
  std::smatch m;
  if (!std::regex_search(log, m, block)) return {-1, -1};
  return {std::stoi(m[2]), std::stoll(m[1])};
}

class CubinResourcesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    out_ = new NvrtcOutput(
        compile_to_cubin(kTwoKernels, "two.cu", "spilling", "sm_90a", {"--maxrregcount=32"}));
  }
  static void TearDownTestSuite() { delete out_; }
  static NvrtcOutput* out_;
};
NvrtcOutput* CubinResourcesTest::out_ = nullptr;

TEST_F(CubinResourcesTest, AgreeWithPtxasForEachKernel) {
  if (!out_->resources_in_log)
    GTEST_SKIP() << "NVRTC served this compile from its cache, so there is no ptxas report to "
                    "compare with (set CUDA_CACHE_DISABLE=1)";
  for (const std::string entry : {"small", "spilling"}) {
    const auto [registers, frame] = from_log(out_->log, entry);
    ASSERT_GT(registers, 0) << "no ptxas lines for " << entry << " in:\n" << out_->log;
    const CubinResources r = read_cubin_resources(out_->cubin, entry);
    EXPECT_EQ(r.registers, registers) << entry;
    EXPECT_EQ(r.stack_frame, frame) << entry;
  }
  EXPECT_EQ(read_cubin_resources(out_->cubin, "small").stack_frame, 0);
  EXPECT_GT(read_cubin_resources(out_->cubin, "spilling").stack_frame, 0);
  EXPECT_LE(read_cubin_resources(out_->cubin, "spilling").registers, 32);
}

TEST_F(CubinResourcesTest, CompileReportsTheEntrysResources) {
  EXPECT_EQ(out_->registers, read_cubin_resources(out_->cubin, "spilling").registers);
  EXPECT_GT(out_->stack_frame, 0);
  if (out_->resources_in_log) {
    EXPECT_GT(out_->spill_stores, 0) << out_->log;
  } else {
    EXPECT_EQ(out_->spill_stores, -1) << "a stack frame without ptxas's report: spills unknown";
  }
}

TEST_F(CubinResourcesTest, RefusesWhatIsNotAKernelsCubin) {
  const auto expect_error = [](const std::vector<char>& bytes, const std::string& entry,
                               const std::string& words) {
    try {
      read_cubin_resources(bytes, entry);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(entry), std::string::npos) << what;
      EXPECT_NE(what.find(words), std::string::npos) << what;
    }
  };
  expect_error(out_->cubin, "no_such_kernel", "no symbol");
  expect_error({'n', 'o', 't', ' ', 'e', 'l', 'f'}, "small", "not an ELF");
  std::vector<char> text(100, 'x');
  expect_error(text, "small", "not an ELF");
  for (std::size_t keep : {std::size_t{64}, out_->cubin.size() / 2, out_->cubin.size() - 1}) {
    const std::vector<char> truncated(out_->cubin.begin(), out_->cubin.begin() + keep);
    try {
      read_cubin_resources(truncated, "spilling");
      // Cutting the tail can leave every field this reader needs intact.
      EXPECT_GT(keep, out_->cubin.size() / 2) << "a cubin cut to " << keep << " bytes was read";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("spilling"), std::string::npos) << e.what();
    }
  }
}

// The cubin with every occurrence of `from` replaced by `to` (same length);
// fails the test when `from` is not there.
std::vector<char> patched(const std::vector<char>& cubin, const std::string& from,
                          const std::string& to) {
  std::string bytes(cubin.begin(), cubin.end());
  std::size_t n = 0;
  for (std::size_t at = 0; (at = bytes.find(from, at)) != std::string::npos; at += from.size(), ++n)
    bytes.replace(at, from.size(), to);
  EXPECT_GT(n, 0u) << "the cubin holds no such bytes to patch";
  return {bytes.begin(), bytes.end()};
}

TEST_F(CubinResourcesTest, RefusesBrokenAttributeSections) {
  // A sized (format 4) REGCOUNT (0x2f) record of 8 bytes: {symbol, registers}.
  const std::string regcount("\x04\x2f\x08\x00", 4);
  const auto refused = [](const std::vector<char>& bytes, const std::string& words) {
    try {
      read_cubin_resources(bytes, "spilling");
      ADD_FAILURE() << "accepted a cubin with " << words;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused(patched(out_->cubin, regcount, std::string("\x04\x30\x08\x00", 4)), "no register count");
  refused(patched(out_->cubin, regcount, std::string("\x07\x2f\x08\x00", 4)), "unknown format 7");
  // A record claiming more bytes than its section holds.
  refused(patched(out_->cubin, regcount, std::string("\x04\x2f\xf0\xff", 4)),
          "runs past the section");
  refused(patched(out_->cubin, std::string(".nv.info\0", 9), std::string(".nv.infx\0", 9)),
          "no .nv.info section");
}

}  // namespace
}  // namespace fp8c::runtime
