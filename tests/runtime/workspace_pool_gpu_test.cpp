// The GEMM workspace pool: a stream keeps its buffer, the pool never holds
// more than it was given, and a stream beyond that takes over the buffer
// used longest ago. Skipped, visibly, without a GPU.
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

}  // namespace
}  // namespace fp8c::runtime
