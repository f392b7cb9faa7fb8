// The GPU executor for one rank of one layer: the same LayerPlan the CPU
// reference executor runs, step for step, with generated kernels, a GEMM
// runner and a device communicator, enqueued on one stream, or, where the
// layout asks for overlap, with the collectives on a second stream ordered
// by events. The communicator's synchronize() bounds every wait by its
// timeout.
//
// Buffers: one device arena holds every tensor of the plan; externals (x, w,
// b, dy) either live there (upload) or are bound to the caller's device
// memory (bind). Per-tensor scale tensors are a pair, the scale and, 16 bytes
// on, its inverse: quantize kernels read the first, GEMMs the second
// (cuBLASLt reads scales only from 16-byte aligned addresses). Delayed-scaling
// scales, amaxes and histories are views into DeviceLayerState, so the
// update pass changes the state in place and nothing else does.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/kernels/plan_kernels.hpp"
#include "codegen/plan/plan.hpp"
#include "runtime/comm/device_communicator.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/cpu/tensor_store.hpp"
#include "runtime/device.hpp"
#include "runtime/gemm/gemm.hpp"
#include "runtime/gpu/kernel_set.hpp"
#include "runtime/gpu/layer_state.hpp"
#include "runtime/gpu/step_profiler.hpp"

namespace fp8c::runtime {

using ExecutorError = cpu::ExecutorError;

struct RankResources {
  const KernelSet& kernels;
  DeviceCommunicator& comm;
  GemmRunner& gemm;
  CUstream stream = nullptr;
  // Where collectives run when the layout asks for overlap (bulk, ring):
  // each waits only for the steps that produce its inputs, and each step
  // that reads a collective's output waits for that collective, so the
  // all-gather of one input runs beside the cast of another. Null: every
  // step on `stream`, in plan order.
  CUstream comm_stream = nullptr;
};

// The kernels every step of `plan` needs (with those of the GEMM fallbacks:
// an activation kernel after a GEMM that cannot apply it, dequantize kernels
// for operands the GEMM runner cannot read), and the dbias output types;
// throws ExecutorError naming each step fp8c cannot run on a GPU yet.
struct LayerKernels {
  std::vector<GeneratedKernel> kernels;
  std::vector<ElemType> dbias_outputs;
  // Adds what `other` has and this lacks (several layers, one kernel set).
  void merge(LayerKernels other);
};
LayerKernels layer_kernels(const Layer& layer, const LayerPlan& plan);

class GpuRankExecutor {
 public:
  GpuRankExecutor(const Layer& layer, const LayerPlan& plan, const RankResources& resources,
                  DeviceLayerState& state);

  const LayerPlan& plan() const { return plan_; }

  // The device address of a plan tensor by key ("x", "w.fp8.row", ...);
  // throws when the plan has no such tensor.
  CUdeviceptr address(std::string_view key) const;
  int find(std::string_view key) const;
  // Points tensor `key` (an input the caller provides, or an output the
  // caller wants written in place) at caller-owned device memory of the
  // plan's size. Not the delayed-scaling state.
  void bind(std::string_view key, CUdeviceptr data);
  void set_stream(CUstream stream) { r_.stream = stream; }
  // Benchmarks only: collectives are not run (their outputs keep whatever
  // they held), to time the rest of a step without communication.
  void set_skip_collectives(bool skip) { skip_collectives_ = skip; }
  // Times every step from now on (null: stop).
  void set_profiler(StepProfiler* profiler) { profiler_ = profiler; }
  // Enqueues only the GEMM steps of forward and backward, on the buffers the
  // last full step left: the baseline `fp8c bench` compares a step with.
  void run_gemms_only();
  CUstream stream() const { return r_.stream; }
  // Copies every external tensor `host` has written into its device buffer
  // (not the delayed scales: those are the state's), synchronously.
  void upload_externals(const cpu::TensorStore& host);

  // Enqueue one pass. Under `nan = error`, update() first waits for the
  // stream and fails (leaving the state as it was) if an amax is NaN.
  void forward();
  void backward();
  void update();
  void synchronize();

  // Copies every tensor a step wrote (and every external) into `host`,
  // marking it written; the stream must be idle.
  void download(cpu::TensorStore& host) const;

 private:
  struct Slot {
    CUdeviceptr scale = 0, inverse = 0;
  };
  void run_pass(const char* pass, const std::vector<Step>& steps,
                const std::vector<StepKernels>& kernels, bool gemms_only = false);
  bool overlapped() const {
    return r_.comm_stream != nullptr && layer_.layout.overlap != Overlap::none;
  }
  void execute(const Step& s, const StepKernels& k);
  void quantize(const Step& s, const StepKernels& k);
  void amax(const Step& s, const StepKernels& k);
  void gemm(const Step& s);
  void run_gemm(const Step& s, const GemmArgs& g);
  void permute(const Step& s, const StepKernels& k);
  void collective(const Step& s);
  void scale_update(const Step& s, const StepKernels& k);
  void epilogue(const Step& s, const StepKernels& k);
  void dequantize(const Step& s, const StepKernels& k);
  // A GEMM whose operands the runner cannot take as they are (block and MX
  // scalings cuBLASLt does not read on this GPU): both dequantized to the
  // layer dtype into scratch, then a high-precision GEMM.
  void dequantized_gemm(const Step& s, GemmArgs g);
  CUdeviceptr dequantized(int id, CUdeviceptr into);
  // The arguments that dequantize FP8 tensor `id` (its scales, segments) into `out`.
  DequantizeArgs dequantize_args(int id, CUdeviceptr out) const;
  GemmOperand operand(int id, const std::string& k_name) const;
  Slot slot(int scale_tensor) const;
  CUdeviceptr at(int id) const { return addresses_.at(static_cast<std::size_t>(id)); }
  std::string key(int id) const { return cpu::tensor_key(plan_, id); }
  void zero(CUdeviceptr p, std::size_t bytes);
  void check_nan();

  const Layer& layer_;
  const LayerPlan& plan_;
  RankResources r_;
  DeviceLayerState& state_;
  std::vector<StepKernels> forward_kernels_, backward_kernels_, update_kernels_;
  DeviceBuffer arena_;
  DeviceBuffer scratch_;          // dbias tile partials
  DeviceBuffer operand_scratch_;  // dequantized GEMM operands (fallback GEMMs)
  DeviceBuffer staging_;          // dz before a block quantize that fuses no dact
  std::vector<bool> gathered_inner_;
  std::vector<CUdeviceptr> addresses_;
  std::vector<bool> state_view_;  // the address is in DeviceLayerState
  std::vector<bool> written_;
  StepProfiler* profiler_ = nullptr;
  bool skip_collectives_ = false;
  // Overlap: one event per step of a pass, and which step (and stream) last
  // wrote each tensor in this pass.
  std::vector<std::unique_ptr<Event>> step_events_;
  std::unique_ptr<Event> fork_, join_;
  std::vector<int> producer_;  // step index, -1: before this pass
  std::vector<bool> produced_on_comm_;
};

}  // namespace fp8c::runtime
