// overlap = ring with data that lands late: in single-GPU multi-rank mode
// the group's ring_shift returns with the data already in place (it
// synchronises), so a missing wait between the main stream and the
// communication stream could not show. Here each rank's communicator moves
// the data through the group into a buffer of its own and then, on the
// caller's stream, spins for about a millisecond before copying it into
// place, returning at once, as NCCL does. Every ring layer must still give,
// bit for bit, what it gives with the group alone. Skipped, visibly,
// without a GPU.
#include <gtest/gtest.h>

#include <atomic>

#include "../cpu/cpu_test_support.hpp"
#include "../runtime/gpu_fixture.hpp"
#include "codegen/plan/planner.hpp"
#include "collectives/device/device_communicator.hpp"
#include "runtime/gpu/run_layer.hpp"
#include "runtime/kernel_launchers.hpp"

namespace fp8c::runtime {
namespace {

using fp8c::testing::gpu;

KernelSource spin_source() {
  return {"test_spin",
          "test_spin",
          "extern \"C\" __global__ void test_spin(long long cycles) {\n"
          "  const long long start = clock64();\n"
          "  while (clock64() - start < cycles) {}\n"
          "}\n",
          {}};
}

// ring_shift lands late on the stream; everything else is the group's.
class LateRingShift : public DeviceCommunicator {
 public:
  LateRingShift(std::unique_ptr<DeviceCommunicator> inner, const LoadedKernel& spin)
      : DeviceCommunicator(inner->rank(), inner->size(), inner->timeout()),
        inner_(std::move(inner)),
        spin_(spin) {}

  std::string_view backend_name() const override { return "late ring_shift (test)"; }
  void all_gather(CUdeviceptr send, CUdeviceptr recv, std::size_t n, ElemType t,
                  CUstream s) override {
    inner_->all_gather(send, recv, n, t, s);
  }
  void reduce_scatter(CUdeviceptr send, CUdeviceptr recv, std::size_t n, ElemType t, ReduceOp op,
                      CUstream s) override {
    inner_->reduce_scatter(send, recv, n, t, op, s);
  }
  void all_reduce(CUdeviceptr send, CUdeviceptr recv, std::size_t n, ElemType t, ReduceOp op,
                  CUstream s) override {
    inner_->all_reduce(send, recv, n, t, op, s);
  }
  void broadcast(CUdeviceptr send, CUdeviceptr recv, std::size_t n, ElemType t, int root,
                 CUstream s) override {
    inner_->broadcast(send, recv, n, t, root, s);
  }
  // The group synchronises `s` first, so the previous call's copy out of
  // `landing_` is done before the group writes it again.
  void ring_shift(CUdeviceptr send, CUdeviceptr recv, std::size_t n, ElemType t,
                  CUstream s) override {
    const std::size_t bytes = n * element_bytes(t);
    if (landing_.bytes() < bytes) landing_ = DeviceBuffer(bytes);
    inner_->ring_shift(send, landing_.get(), n, t, s);
    long long cycles = 2'000'000;  // about 1 ms at the H200's clocks
    void* args[] = {&cycles};
    LaunchShape one;
    launch(spin_.function(), one, s, args);
    FP8C_CU(driver().cuMemcpyDtoDAsync(recv, landing_.get(), bytes, s));
    ++shifts_;
  }
  void synchronize(CUstream s) override { inner_->synchronize(s); }
  void abort(const std::string& reason) noexcept override { inner_->abort(reason); }
  bool poisoned() const override { return inner_->poisoned(); }

  static inline std::atomic<int> shifts_{0};

 private:
  std::unique_ptr<DeviceCommunicator> inner_;
  const LoadedKernel& spin_;
  DeviceBuffer landing_{256};
};

TEST(RingLateData, EveryRingWaitsForItsDataOnBothStreams) {
  REQUIRE_GPU();
  const LoadedKernel spin(*gpu().jit, spin_source());
  for (const char* recipe : {"current", "delayed { history = 4 }"})
    for (const char* mode : {"column", "row"}) {
      SCOPED_TRACE(std::string(recipe) + " " + mode);
      const int ranks = 3;
      const bool column = std::string(mode) == "column";
      const Spec spec = cpu::testing::spec_from(
          "layer l = linear {\n  in = " + std::to_string(column ? 160 : 48 * ranks) + "  out = " +
          std::to_string(column ? 96 * ranks : 208) + "  bias = true\n  recipe = " + recipe +
          "\n  layout = { tensor_parallel = 3  sequence_parallel = true  overlap = ring } " + mode +
          "\n}\n");
      PlanOptions po;
      po.tokens = 128 * ranks;  // column: the wgrad's K segments are a ring too
      const Plan plan = plan_spec(spec, po);
      const Layer& layer = spec.layers[0];
      // Different data each step: a chunk read before its data landed reads
      // the step before's.
      std::vector<cpu::LayerData> steps;
      for (std::uint64_t s = 0; s < 3; ++s)
        steps.push_back(cpu::random_layer_data(layer, po.tokens, 40 + s));
      const auto want = run_layer_on_gpu(*gpu().device, *gpu().jit, layer, plan.layers[0], steps);
      GpuRunOptions late;
      late.wrap =
          [&](std::unique_ptr<DeviceCommunicator> c) -> std::unique_ptr<DeviceCommunicator> {
        return std::make_unique<LateRingShift>(std::move(c), spin);
      };
      const int before = LateRingShift::shifts_;
      const auto got =
          run_layer_on_gpu(*gpu().device, *gpu().jit, layer, plan.layers[0], steps, late);
      // Column: x's gather twice and dx's sum; row: y's sum; 2 shifts each.
      EXPECT_EQ(LateRingShift::shifts_ - before, 3 * ranks * (column ? 3 : 1) * (ranks - 1));
      for (int r = 0; r < ranks; ++r)
        for (std::size_t s = 0; s < steps.size(); ++s) {
          const auto& a = got[static_cast<std::size_t>(r)][s];
          const auto& b = want[static_cast<std::size_t>(r)][s];
          EXPECT_EQ(a.y, b.y) << "rank " << r << " step " << s;
          EXPECT_EQ(a.dx, b.dx) << "rank " << r << " step " << s;
          EXPECT_EQ(a.dw, b.dw) << "rank " << r << " step " << s;
          EXPECT_EQ(a.db, b.db) << "rank " << r << " step " << s;
          EXPECT_EQ(a.state, b.state) << "rank " << r << " step " << s;
        }
    }
}

}  // namespace
}  // namespace fp8c::runtime
