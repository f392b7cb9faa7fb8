// Several kernels compiled as one NVRTC program (runtime/kernel_batch.hpp):
// the grouping, the program's source (kernels that reuse names and macros
// compile together), each kernel's resources as if compiled alone, its own
// cache entry, errors that name the kernel, and (on a GPU) every entry of a
// batch's CUBIN loading and computing what it computes alone.
#include "runtime/kernel_batch.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "runtime/jit.hpp"
#include "runtime/nvrtc.hpp"
#include "tests/runtime/gpu_fixture.hpp"
#include "tests/runtime/scratch_cache_test.hpp"

namespace fp8c::runtime {
namespace {

// Kernel `i` adds i + 1 to each element. Every kernel defines the same macro
// (with its own value) and the same helper and type names, as generated
// kernels do.
KernelSource add_kernel(int i) {
  const std::string n = std::to_string(i);
  return {"add_" + n,
          "add_" + n,
          "#define ADDEND " + n +
              ".0f\n"
              "typedef unsigned int u32;\n"
              "__device__ __forceinline__ float bump(float x) { return x + ADDEND + 1.0f; }\n"
              "extern \"C\" __global__ void add_" +
              n +
              "(float* x, u32 n) {\n"
              "  u32 i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "  if (i < n) x[i] = bump(x[i]);\n}\n",
          {}};
}

// Keeps 96 live values under a 32-register cap: ptxas must spill them.
KernelSource spilling_kernel() {
  return {"spilling",
          "spilling",
          "#define ADDEND 0.5f\n"
          "extern \"C\" __global__ void spilling(float* x, int n) {\n"
          "  float a[96];\n#pragma unroll\n"
          "  for (int k = 0; k < 96; ++k) a[k] = x[k * n + threadIdx.x];\n"
          "  float s = ADDEND;\n#pragma unroll\n"
          "  for (int k = 0; k < 96; ++k) s += a[k] * a[(k * 7) % 96];\n#pragma unroll\n"
          "  for (int k = 0; k < 96; ++k) x[k * n + threadIdx.x] = a[k] * s;\n}\n",
          {"--maxrregcount=32"}};
}

TEST(BalanceBatches, EveryIndexOnceNoEmptyGroupAndBalancedLoads) {
  const std::vector<double> costs = {250, 45, 60, 85, 130, 130, 150, 130, 85};
  const auto groups = balance_batches(costs, 2);
  ASSERT_EQ(groups.size(), 2u);
  std::multiset<std::size_t> seen;
  std::vector<double> load;
  for (const auto& g : groups) {
    ASSERT_FALSE(g.empty());
    EXPECT_TRUE(std::is_sorted(g.begin(), g.end())) << "input order within a group";
    double sum = 0;
    for (std::size_t i : g) seen.insert(i), sum += costs[i];
    load.push_back(sum);
  }
  EXPECT_EQ(seen.size(), costs.size());
  EXPECT_EQ(std::set<std::size_t>(seen.begin(), seen.end()).size(), costs.size());
  // Longest first to the lightest group: within the largest cost of the ideal split.
  const double total = std::accumulate(costs.begin(), costs.end(), 0.0);
  EXPECT_LE(std::max(load[0], load[1]), total / 2 + 250);
  EXPECT_LE(std::max(load[0], load[1]) - std::min(load[0], load[1]), 130.0);
}

TEST(BalanceBatches, NoMoreGroupsThanKernels) {
  EXPECT_EQ(balance_batches({1, 2, 3}, 8).size(), 3u);
  EXPECT_TRUE(balance_batches({}, 4).empty());
  EXPECT_EQ(balance_batches({5, 5}, 1).size(), 1u);
}

TEST(BatchSource, KernelsThatReuseNamesAndMacrosCompileAsOneProgramWithTheirOwnResources) {
  std::vector<KernelSource> k = {add_kernel(0), add_kernel(1), spilling_kernel()};
  for (auto& s : k) s.options = {"--maxrregcount=32"};
  const std::vector<const KernelSource*> all = {&k[0], &k[1], &k[2]};
  const NvrtcBatchOutput batch = compile_batch_to_cubin(
      batch_source(all), "batch.cu", {"add_0", "add_1", "spilling"}, "sm_90a", k[0].options);
  ASSERT_EQ(batch.entries.size(), 3u);
  for (std::size_t i = 0; i < k.size(); ++i) {
    SCOPED_TRACE(k[i].entry);
    const NvrtcOutput alone =
        compile_to_cubin(k[i].source, k[i].name + ".cu", k[i].entry, "sm_90a", k[i].options);
    EXPECT_EQ(batch.entries[i].registers, alone.registers);
    EXPECT_EQ(batch.entries[i].stack_frame, alone.stack_frame);
    if (alone.resources_in_log && batch.entries[i].resources_in_log) {
      EXPECT_EQ(batch.entries[i].spill_stores, alone.spill_stores);
      EXPECT_EQ(batch.entries[i].spill_loads, alone.spill_loads);
    }
  }
  if (batch.entries[2].resources_in_log) {
    EXPECT_GT(batch.entries[2].spill_stores, 0) << "the spilling kernel spills";
    EXPECT_EQ(batch.entries[0].spill_stores, 0) << "its neighbour is not charged for it";
  }
}

using BatchJitTest = testing::ScratchCacheTest;

TEST_F(BatchJitTest, OneThreadCompilesOneProgramAndCachesEachKernelUnderItsOwnKey) {
  std::vector<KernelSource> kernels = {add_kernel(0), add_kernel(1), add_kernel(2)};
  const auto first = jit().compile_all(kernels, 1);
  ASSERT_EQ(first.size(), 3u);
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_EQ(first[i].name, kernels[i].name);
    EXPECT_EQ(first[i].cache, CacheOutcome::compiled);
    EXPECT_GT(first[i].registers, 0);
    EXPECT_EQ(first[i].cubin, first[0].cubin) << "one program: one CUBIN";
  }
  // Each kernel alone (compile) and all of them again find their entries.
  for (const auto& k : kernels) EXPECT_EQ(jit().compile(k).cache, CacheOutcome::hit) << k.name;
  for (const auto& c : jit().compile_all(kernels, 1)) EXPECT_EQ(c.cache, CacheOutcome::hit);
  // One new kernel among cached ones: only it is compiled.
  kernels.push_back(add_kernel(3));
  const auto more = jit().compile_all(kernels, 1);
  EXPECT_EQ(more[3].cache, CacheOutcome::compiled);
  EXPECT_NE(more[3].cubin, more[0].cubin);
}

TEST_F(BatchJitTest, ABrokenKernelInABatchIsNamedWithItsOwnLog) {
  std::vector<KernelSource> kernels = {add_kernel(0), add_kernel(1), add_kernel(2)};
  kernels[1].source += "this is not CUDA\n";
  try {
    jit().compile_all(kernels, 1);
    FAIL() << "a kernel that does not compile was accepted";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("add_1.cu"), std::string::npos) << m;
    EXPECT_EQ(m.find("batch"), std::string::npos) << "the error names the kernel: " << m;
  }
}

TEST_F(BatchJitTest, KernelsWithDifferentOptionsAreNotBatchedTogether) {
  std::vector<KernelSource> kernels = {add_kernel(0), add_kernel(1), spilling_kernel()};
  const auto compiled = jit().compile_all(kernels, 1);
  EXPECT_EQ(compiled[0].cubin, compiled[1].cubin);
  EXPECT_NE(compiled[0].cubin, compiled[2].cubin);
}

TEST_F(BatchJitTest, EveryEntryOfABatchLoadsAndComputesOnTheGpu) {
  REQUIRE_GPU();
  std::vector<KernelSource> kernels;
  for (int i = 0; i < 5; ++i) kernels.push_back(add_kernel(i));
  const auto compiled = jit(testing::gpu().device->arch()).compile_all(kernels, 2);
  const unsigned n = 1000;
  for (std::size_t i = 0; i < compiled.size(); ++i) {
    SCOPED_TRACE(compiled[i].name);
    const Module module(compiled[i].cubin);
    const CUfunction f = module.function(compiled[i].entry);
    std::vector<float> host(n);
    std::iota(host.begin(), host.end(), 0.0f);
    DeviceBuffer x(n * sizeof(float));
    x.upload(host.data(), n * sizeof(float));
    CUdeviceptr p = x.get();
    unsigned count = n;
    void* args[] = {&p, &count};
    LaunchShape shape;
    shape.grid[0] = (n + 255) / 256;
    shape.block[0] = 256;
    Stream stream;
    launch(f, shape, stream.get(), args);
    std::vector<float> out(n);
    stream.synchronize();
    x.download(out.data(), n * sizeof(float));
    for (unsigned j = 0; j < n; ++j)
      ASSERT_EQ(out[j], float(j) + float(i) + 1.0f) << "element " << j;
  }
}

}  // namespace
}  // namespace fp8c::runtime
