// The GEMM workspace pool: a stream keeps its buffer, the pool never holds
// more than it was given, and a stream beyond that takes over the buffer
// used longest ago; a buffer captured into a CUDA graph stays its stream's.
// Skipped, visibly, without a GPU.
#include "runtime/gemm/workspace_pool.hpp"

#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

namespace fp8c::runtime {
namespace {

TEST(GemmWorkspacePoolGpu, StreamsShareAtMostCountBuffers) {
  REQUIRE_GPU();
  testing::gpu();
  WorkspacePool pool(1 << 20, 2);
  Stream one, two, three;
  const CUdeviceptr first = pool.acquire(one.get()).get();
  pool.used(one.get());
  const CUdeviceptr second = pool.acquire(two.get()).get();
  pool.used(two.get());
  EXPECT_NE(first, second);
  EXPECT_EQ(pool.acquire(one.get()).get(), first) << "a stream keeps its buffer";
  pool.used(one.get());
  // `two` was used longest ago: `three` takes its buffer over.
  EXPECT_EQ(pool.acquire(three.get()).get(), second);
  pool.used(three.get());
  EXPECT_EQ(pool.buffers(), 2u);
  EXPECT_EQ(pool.acquire(one.get()).get(), first);
  one.synchronize();
  three.synchronize();
}

// A capture pins the capturing stream's own buffer: a stream beyond
// `count` gets a new one instead of taking it over, and a capturing stream
// with no buffer of its own is refused (nothing is allocated mid-capture).
TEST(GemmWorkspacePoolGpu, ACapturedBufferStaysItsStreams) {
  REQUIRE_GPU();
  testing::gpu();
  const DriverApi& cu = driver();
  WorkspacePool pool(1 << 20, 1);
  Stream one, two, three;
  const CUdeviceptr first = pool.acquire(one.get()).get();
  pool.used(one.get());
  FP8C_CU(cu.cuStreamBeginCapture(one.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  const CUdeviceptr captured = pool.acquire(one.get()).get();
  pool.used(one.get());
  CUgraph graph = nullptr;
  FP8C_CU(cu.cuStreamEndCapture(one.get(), &graph));
  cu.cuGraphDestroy(graph);
  EXPECT_EQ(captured, first);
  const CUdeviceptr second = pool.acquire(two.get()).get();
  pool.used(two.get());
  EXPECT_NE(second, first) << "a pinned buffer was taken over";
  EXPECT_EQ(pool.buffers(), 2u);
  // `three` takes over `two`'s unpinned buffer, not `one`'s.
  EXPECT_EQ(pool.acquire(three.get()).get(), second);
  pool.used(three.get());
  EXPECT_EQ(pool.acquire(one.get()).get(), first);
  pool.used(one.get());

  FP8C_CU(cu.cuStreamBeginCapture(two.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  try {
    pool.acquire(two.get());
    ADD_FAILURE() << "a capturing stream without a buffer of its own got one";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no workspace of its own"), std::string::npos) << e.what();
  }
  graph = nullptr;
  cu.cuStreamEndCapture(two.get(), &graph);
  if (graph) cu.cuGraphDestroy(graph);
  one.synchronize();
  three.synchronize();
}

}  // namespace
}  // namespace fp8c::runtime
