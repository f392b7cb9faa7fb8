#include "runtime/cubin_cache.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "runtime/jit.hpp"
#include "tests/runtime/scratch_cache_test.hpp"

namespace fp8c::runtime {
namespace {

namespace fs = std::filesystem;

KernelSource axpy_kernel(const std::string& tag = "") {
  return {"axpy",
          "axpy",
          "// " + tag +
              "\nextern \"C\" __global__ void axpy(float a, const float* x, float* y, int n) {\n"
              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "  if (i < n) y[i] += a * x[i];\n}\n",
          {}};
}

class CacheTest : public testing::ScratchCacheTest {
 protected:
  std::size_t entry_files() const {
    std::size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir_))
      if (e.is_regular_file()) ++n;
    return n;
  }
};

TEST_F(CacheTest, MissThenHitWithTheSameBytes) {
  const Jit j = jit();
  const CompiledKernel first = j.compile(axpy_kernel());
  EXPECT_EQ(first.cache, CacheOutcome::compiled);
  EXPECT_TRUE(first.cache_warning.empty()) << first.cache_warning;
  const CompiledKernel second = j.compile(axpy_kernel());
  EXPECT_EQ(second.cache, CacheOutcome::hit);
  EXPECT_EQ(first.cubin, second.cubin);
  EXPECT_EQ(first.registers, second.registers);
  EXPECT_EQ(entry_files(), 1u);
}

TEST_F(CacheTest, KeyDependsOnSourceArchAndOptionsButNotOnTheDirectory) {
  const Jit a("sm_90a", CubinCache((dir_ / "a").string()));
  const Jit b("sm_90a", CubinCache((dir_ / "b").string()));
  const Jit hopper_generic("sm_90", CubinCache((dir_ / "a").string()));
  EXPECT_EQ(a.key(axpy_kernel()), b.key(axpy_kernel()));
  EXPECT_NE(a.key(axpy_kernel()), a.key(axpy_kernel("changed")));
  EXPECT_NE(a.key(axpy_kernel()), hopper_generic.key(axpy_kernel()));
  KernelSource with_option = axpy_kernel();
  with_option.options.push_back("-DFOO=1");
  EXPECT_NE(a.key(axpy_kernel()), a.key(with_option));
}

// Every kind of damage a crash, a full disk or a stray write can do to an
// entry is detected and the entry is rebuilt with the right bytes.
TEST_F(CacheTest, CorruptTruncatedAndForeignEntriesAreRebuilt) {
  const Jit j = jit();
  const CompiledKernel good = j.compile(axpy_kernel());
  const std::string path = j.cache().path_of(j.key(axpy_kernel()));
  const auto original_size = fs::file_size(path);

  const std::vector<std::function<void()>> damage = {
      [&] { fs::resize_file(path, original_size / 2); },  // truncated payload
      [&] { fs::resize_file(path, 40); },                 // truncated header
      [&] { fs::resize_file(path, 0); },                  // empty
      [&] {                                               // one payload bit flipped
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(original_size) - 7);
        f.put('\x5a');
      },
      [&] {  // trailing garbage
        std::ofstream f(path, std::ios::app | std::ios::binary);
        f << "junk";
      },
      [&] {  // not an entry at all
        std::ofstream f(path, std::ios::trunc | std::ios::binary);
        f << std::string(200, 'x');
      },
  };
  for (std::size_t i = 0; i < damage.size(); ++i) {
    damage[i]();
    const CompiledKernel again = j.compile(axpy_kernel());
    EXPECT_EQ(again.cache, CacheOutcome::rebuilt) << "damage " << i;
    EXPECT_EQ(again.cubin, good.cubin) << "damage " << i;
    EXPECT_EQ(j.compile(axpy_kernel()).cache, CacheOutcome::hit) << "damage " << i;
  }
}

TEST_F(CacheTest, UnwritableDirectoryStillCompilesAndSaysWhy) {
  fs::create_directories(dir_);
  const fs::path file = dir_ / "not-a-directory";
  std::ofstream(file) << "x";
  const Jit j("sm_90a", CubinCache(file.string()));
  const CompiledKernel k = j.compile(axpy_kernel());
  EXPECT_FALSE(k.cubin.empty());
  EXPECT_NE(k.cache_warning.find("not-a-directory"), std::string::npos) << k.cache_warning;
}

TEST_F(CacheTest, ConcurrentWritersInThreadsLeaveOneGoodEntry) {
  std::vector<std::thread> threads;
  std::vector<CompiledKernel> results(6);
  for (std::size_t t = 0; t < results.size(); ++t)
    threads.emplace_back([&, t] { results[t] = jit().compile(axpy_kernel()); });
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r.cubin, results[0].cubin);
  EXPECT_EQ(entry_files(), 1u) << "no temporary file may be left behind";
  EXPECT_EQ(jit().compile(axpy_kernel()).cache, CacheOutcome::hit);
}

TEST_F(CacheTest, ConcurrentProcessesLeaveOneGoodEntry) {
  constexpr int kProcesses = 4;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = 0;
      try {
        const CompiledKernel k = jit().compile(axpy_kernel());
        status = k.cubin.empty() || !k.cache_warning.empty() ? 1 : 0;
      } catch (...) {
        status = 2;
      }
      _exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(entry_files(), 1u);
  EXPECT_EQ(jit().compile(axpy_kernel()).cache, CacheOutcome::hit);
}

TEST_F(CacheTest, CompileAllKeepsOrderAndReportsTheFirstFailure) {
  std::vector<KernelSource> kernels;
  for (int i = 0; i < 4; ++i) kernels.push_back(axpy_kernel(std::to_string(i)));
  const auto compiled = jit().compile_all(kernels, 2);
  ASSERT_EQ(compiled.size(), kernels.size());
  for (std::size_t i = 0; i < kernels.size(); ++i) EXPECT_EQ(compiled[i].name, kernels[i].name);
  kernels[2].source = "this is not CUDA";
  EXPECT_THROW(jit().compile_all(kernels, 2), std::runtime_error);
}

TEST(CacheDirectory, EnvironmentDecides) {
  setenv("FP8C_CACHE_DIR", "/some/where", 1);
  EXPECT_EQ(CubinCache::default_directory(), "/some/where");
  unsetenv("FP8C_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(CubinCache::default_directory(), "/xdg/fp8c");
  unsetenv("XDG_CACHE_HOME");
}

}  // namespace
}  // namespace fp8c::runtime
