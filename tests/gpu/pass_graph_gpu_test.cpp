// PassGraph: a pass runs eagerly with a new key, is captured the second
// time and replayed after; each replay does the pass's work on what the
// buffers hold then; keys alternate without re-capturing; a pass that
// cannot be captured runs eagerly and says why. Skipped, visibly, without
// a GPU.
#include "runtime/gpu/pass_graph.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "../runtime/gpu_fixture.hpp"
#include "runtime/device.hpp"

namespace fp8c::runtime {
namespace {

constexpr std::size_t kBytes = 1 << 16;

std::vector<unsigned char> read(const DeviceBuffer& b) {
  std::vector<unsigned char> v(b.bytes());
  b.download(v.data(), v.size());
  return v;
}

void fill(DeviceBuffer& b, unsigned char byte) {
  std::vector<unsigned char> v(b.bytes(), byte);
  b.upload(v.data(), v.size());
}

// The pass: dst = src, then dst's first byte += 0 via a memset of byte 1 to
// `mark` (two nodes, so the graph has an order to keep).
struct CopyPass {
  const DeviceBuffer& src;
  const DeviceBuffer& dst;
  unsigned char mark;
  CUstream stream;
  void operator()() const {
    FP8C_CU(driver().cuMemcpyDtoDAsync(dst.get(), src.get(), kBytes, stream));
    FP8C_CU(driver().cuMemsetD8Async(dst.get() + 1, mark, 1, stream));
  }
};

TEST(PassGraphGpu, CapturedOnTheSecondRunAndReplayedOnFreshData) {
  REQUIRE_GPU();
  const Stream stream;
  DeviceBuffer src(kBytes), dst(kBytes);
  PassGraph graph;
  const std::vector<std::uint64_t> key = {src.get(), dst.get()};
  const CopyPass pass{src, dst, 0xEE, stream.get()};
  const PassGraph::Outcome expected[] = {PassGraph::Outcome::eager, PassGraph::Outcome::captured,
                                         PassGraph::Outcome::replayed,
                                         PassGraph::Outcome::replayed};
  for (int run = 0; run < 4; ++run) {
    fill(src, static_cast<unsigned char>(run + 1));
    fill(dst, 0);
    EXPECT_EQ(graph.run(stream.get(), key, pass), expected[run]) << "run " << run;
    stream.synchronize();
    const auto got = read(dst);
    EXPECT_EQ(got[0], run + 1) << "run " << run;
    EXPECT_EQ(got[1], 0xEE) << "run " << run;
    EXPECT_EQ(got[kBytes - 1], run + 1) << "run " << run;
  }
  EXPECT_EQ(graph.nodes(), 2u);
  EXPECT_EQ(graph.disabled(), "");
}

TEST(PassGraphGpu, AlternatingKeysEachKeepTheirGraph) {
  REQUIRE_GPU();
  const Stream stream;
  DeviceBuffer src(kBytes), a(kBytes), b(kBytes);
  PassGraph graph;
  std::vector<PassGraph::Outcome> outcomes;
  for (int run = 0; run < 6; ++run) {
    DeviceBuffer& dst = run % 2 ? b : a;
    fill(src, static_cast<unsigned char>(10 + run));
    fill(dst, 0);
    outcomes.push_back(
        graph.run(stream.get(), {src.get(), dst.get()}, CopyPass{src, dst, 0x11, stream.get()}));
    stream.synchronize();
    EXPECT_EQ(read(dst)[0], 10 + run) << "run " << run;
  }
  using O = PassGraph::Outcome;
  EXPECT_EQ(outcomes, (std::vector<O>{O::eager, O::eager, O::captured, O::captured, O::replayed,
                                      O::replayed}));
}

TEST(PassGraphGpu, APassThatCannotBeCapturedRunsEagerlyAndSaysWhy) {
  REQUIRE_GPU();
  const Stream stream;
  DeviceBuffer src(kBytes), dst(kBytes);
  PassGraph graph;
  const std::vector<std::uint64_t> key = {src.get(), dst.get()};
  // A stream synchronize is refused inside a capture: the pass fails there,
  // then runs eagerly, and stays eager.
  const auto pass = [&] {
    CopyPass{src, dst, 0x22, stream.get()}();
    FP8C_CU(driver().cuStreamSynchronize(stream.get()));
  };
  for (int run = 0; run < 3; ++run) {
    fill(src, static_cast<unsigned char>(run + 40));
    fill(dst, 0);
    EXPECT_EQ(graph.run(stream.get(), key, pass), PassGraph::Outcome::eager) << "run " << run;
    stream.synchronize();
    EXPECT_EQ(read(dst)[0], run + 40) << "run " << run;
  }
  EXPECT_NE(graph.disabled(), "");
  // The stream is usable afterwards (no capture left open).
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  FP8C_CU(driver().cuStreamIsCapturing(stream.get(), &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
}

TEST(PassGraphGpu, TheLegacyStreamIsNeverCaptured) {
  REQUIRE_GPU();
  DeviceBuffer src(kBytes), dst(kBytes);
  PassGraph graph;
  for (int run = 0; run < 3; ++run)
    EXPECT_EQ(graph.run(nullptr, {src.get(), dst.get()}, CopyPass{src, dst, 0x33, nullptr}),
              PassGraph::Outcome::eager);
  FP8C_CU(driver().cuCtxSynchronize());
  EXPECT_EQ(graph.disabled(), "");
}

// A caller that captures the whole step into a graph of its own: each pass
// goes into that capture as it is (no capture of ours inside it, which CUDA
// would refuse and which would end the caller's), and the caller's graph
// does the passes' work when launched.
TEST(PassGraphGpu, ACallersCaptureTakesThePassAsItIs) {
  REQUIRE_GPU();
  const Stream stream;
  DeviceBuffer src(kBytes), dst(kBytes);
  PassGraph graph;
  const std::vector<std::uint64_t> key = {src.get(), dst.get()};
  const CopyPass pass{src, dst, 0x44, stream.get()};
  const DriverApi& cu = driver();
  CUgraph outer = nullptr;
  FP8C_CU(cu.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  // Twice: the second run of a key would otherwise be captured by PassGraph.
  for (int run = 0; run < 2; ++run)
    EXPECT_EQ(graph.run(stream.get(), key, pass), PassGraph::Outcome::eager) << "run " << run;
  FP8C_CU(cu.cuStreamEndCapture(stream.get(), &outer));
  ASSERT_NE(outer, nullptr);
  CUgraphExec exec = nullptr;
  FP8C_CU(cu.cuGraphInstantiateWithFlags(&exec, outer, 0));
  fill(src, 0x5A);
  fill(dst, 0);
  FP8C_CU(cu.cuGraphLaunch(exec, stream.get()));
  stream.synchronize();
  const auto got = read(dst);
  EXPECT_EQ(got[0], 0x5A);
  EXPECT_EQ(got[1], 0x44);
  cu.cuGraphExecDestroy(exec);
  cu.cuGraphDestroy(outer);
  EXPECT_EQ(graph.disabled(), "");
}

}  // namespace
}  // namespace fp8c::runtime
