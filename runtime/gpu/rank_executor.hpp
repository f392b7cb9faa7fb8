// The GPU executor for one rank of one layer: the same LayerPlan the CPU
// reference executor runs, step for step, doing exactly what the lowered
// layer (codegen/lower) says for each step: its kernel launches, GEMM calls
// and collectives, enqueued on one stream, or with the collectives the
// lowering puts on the communication stream ordered by events. The
// communicator's synchronize() bounds every wait by its timeout.
//
// Buffers: one device arena holds every tensor of the plan; externals (x, w,
// b, dy) either live there (upload) or are bound to the caller's device
// memory (bind). Per-tensor scale tensors are a pair, the scale and, 16 bytes
// on, its inverse: quantize kernels read the first, GEMMs the second
// (cuBLASLt reads scales only from 16-byte aligned addresses). Delayed-scaling
// scales, amaxes and histories are views into DeviceLayerState, so the
// update pass changes the state in place and nothing else does.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/lower/lowered.hpp"
#include "codegen/plan/plan.hpp"
#include "collectives/device/device_communicator.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/cpu/tensor_store.hpp"
#include "runtime/device.hpp"
#include "runtime/gemm/gemm.hpp"
#include "runtime/gpu/kernel_set.hpp"
#include "runtime/gpu/layer_state.hpp"
#include "runtime/gpu/pass_graph.hpp"
#include "runtime/gpu/step_profiler.hpp"

namespace fp8c::runtime {

using ExecutorError = cpu::ExecutorError;

struct RankResources {
  const KernelSet& kernels;
  DeviceCommunicator& comm;
  GemmRunner& gemm;  // cuBLASLt: GEMM calls on "cublaslt"
  CUstream stream = nullptr;
  // Where collectives run when the lowered layer puts them on the
  // communication stream (overlap = bulk, ring): each waits only for the
  // steps that produce its inputs, and each step that reads a collective's
  // output waits for that collective, so the all-gather of one input runs
  // beside the cast of another. Null: every step on `stream`.
  CUstream comm_stream = nullptr;
  // The generated GEMM, for the GEMM calls the lowering puts on it (layers
  // with `gemm = generated`); null where the GPU cannot run it, and then
  // such a call is an ExecutorError.
  GemmRunner* generated = nullptr;
  // Where the steps the lowering puts on the side stream run (work beside
  // the GEMMs: codegen/lower/schedule.hpp), each waiting for the steps it
  // follows, and each step after it waiting for it. Null: on `stream`, in
  // the lowering's issue order.
  CUstream side_stream = nullptr;
};

// A layer's lowering with `options` (on a GPU: cublaslt_lower_options(), what
// the current context's GPU and the loaded cuBLASLt offer), refused
// (ExecutorError naming every reason) when it has something the GPU cannot
// run yet.
LoweredLayer lower_for_gpu(const Layer& layer, const LayerPlan& plan, const LowerOptions& options);

class GpuRankExecutor {
 public:
  // `lowered` is lower_for_gpu(layer, plan, ...); `resources.kernels` holds its kernels.
  GpuRankExecutor(const Layer& layer, const LayerPlan& plan, const LoweredLayer& lowered,
                  const RankResources& resources, DeviceLayerState& state);

  const LayerPlan& plan() const { return plan_; }

  // The device address of plan tensor `id`.
  CUdeviceptr address(int id) const;
  // Points tensor `id` (an input the caller provides, or an output the
  // caller wants written in place) at caller-owned device memory of the
  // plan's size. Not the delayed-scaling state.
  void bind(int id, CUdeviceptr data);
  // A per-tensor scale and its inverse, wherever they live: the layer's
  // state for a delayed scale, else the pair in the arena.
  struct ScalePair {
    CUdeviceptr scale = 0, inverse = 0;
  };
  ScalePair scale_pair(int scale_tensor) const { return slot(scale_tensor); }
  // Reads scale tensor `id` (not a delayed scale of this layer) from `pair`
  // from now on: a producer's FP8 output scale is its consumer's input
  // scale, read where the consumer's state keeps it, with no copy.
  void bind_scale(int id, ScalePair pair);
  void set_stream(CUstream stream) { r_.stream = stream; }
  // Benchmarks only: collectives are not run (their outputs keep whatever
  // they held), to time the rest of a step without communication.
  void set_skip_collectives(bool skip) { skip_collectives_ = skip; }
  // Times every step from now on (null: stop).
  void set_profiler(StepProfiler* profiler) { profiler_ = profiler; }
  // Enqueues only the GEMM steps of forward and backward, on the buffers the
  // last full step left: the baseline `fp8c bench` compares a step with.
  void run_gemms_only();
  // Has the generated GEMM's runner ready every call of forward and backward
  // on it as the call will be made (GemmRunner::prepare: compiles and loads
  // its configurations), enqueueing nothing: a Session does this at start-up
  // so that no step stalls on a compile.
  void prepare_gemms();
  CUstream stream() const { return r_.stream; }
  // Copies every external tensor `host` has written into its device buffer
  // (not the delayed scales: those are the state's); complete on return.
  void upload_externals(const cpu::TensorStore& host);

  // The FP8 weight cache (LoweredStep::weight_only; TransformerEngine's
  // is_first_microbatch). enable_weight_cache(), before the first pass (a
  // graph captured before it would not copy the scale pair: later is a
  // std::logic_error):
  // each delayed scale a weight-only step casts with becomes a pair of this
  // executor's, copied from the state right before the weight is cast and
  // read by every GEMM of the cast weight, so that a kept FP8 weight stays
  // with the scale it was cast with while the update moves the state's.
  // set_weight_cached(true) skips the weight-only steps of the passes
  // enqueued from then on; what they wrote last stays where it is (the
  // weight's amax too: the update takes it again). The caller decides when
  // the weight is unchanged (Session: LayerInputs::w_version), on every
  // rank alike.
  void enable_weight_cache();
  void set_weight_cached(bool cached);
  bool weight_cached() const { return weight_cached_; }

  // CUDA Graphs (off until turned on): forward(), and backward_and_update(),
  // each enqueued as one graph (runtime/gpu/pass_graph.hpp): eager the first
  // time with a set of bound addresses, captured the second, replayed after
  // that; a bind() or bind_scale() to another address re-captures. Passes
  // stay eager while a profiler is set or collectives are skipped (the
  // breakdown times each step as launched), and where a pass has a
  // collective the communicator cannot have captured (capturable()).
  void set_graphs(bool on) { graphs_ = on; }
  struct GraphCounts {
    int eager = 0, captured = 0, replayed = 0;
  };
  GraphCounts graph_counts() const { return graph_counts_; }
  // Why a pass ("forward", "backward") is not a graph ("" where it is).
  std::string graph_disabled(std::string_view pass) const;

  // Enqueue one pass. Under `nan = error`, update() enqueues the step's NaN
  // verdict (LoweredLayer::nan_verdict) and a scale update that writes
  // nothing on a NaN, so the state stays as it was. The host learns the
  // verdict at the layer's next call (forward of the next step, which waits
  // for it: the host runs ahead of the GPU within a step, not across the
  // same layer's steps) or at synchronize(), whichever comes first: the
  // same call on every rank, each throwing ExecutorError naming the tensor.
  void forward();
  void backward();
  void update();
  // backward() then update(), as one graph where graphs are on.
  void backward_and_update();
  // Waits for the stream; throws a pending NaN verdict.
  void synchronize();
  // Throws if the last verdict (waited for) found a NaN; reported once.
  void check_nan_verdict();

  // Copies every tensor a step wrote (and every external) into `host`,
  // marking it written; the stream must be idle.
  void download(cpu::TensorStore& host) const;

 private:
  using Slot = ScalePair;
  // Enqueues a pass's steps in `order` (the lowering's issue order; empty:
  // plan order), each on its stream, waiting for the steps it follows.
  void run_pass(const char* pass, const std::vector<Step>& steps,
                const std::vector<LoweredStep>& lowered, const std::vector<int>& order,
                bool gemms_only = false);
  void execute(const Step& s, const LoweredStep& l);
  void quantize(const QuantizeStep& s, const LoweredStep& l);
  void amax(const AmaxStep& s, const LoweredStep& l);
  void gemm(const GemmStep& s, const LoweredStep& l);
  void run_gemm(const GemmStep& s, const GemmCall& call, const GemmArgs& g);
  // overlap = ring (codegen/lower/ring.hpp), inside the GEMM step.
  CUstream ring_stream() const { return r_.comm_stream ? r_.comm_stream : r_.stream; }
  // GEMMs alone, or collectives skipped: a ring GEMM runs whole.
  bool ring_skipped() const { return skip_collectives_ || gemms_only_; }
  Event& ring_event(std::size_t i);
  void ring_gather_begin(const AllGatherStep& ag);
  void ring_gather_shift(const AllGatherStep& ag, int shift);
  void ring_gather_rows(const GemmStep& s, const GemmCall& call, const GemmArgs& g,
                        const AllGatherStep& ag);
  void ring_scatter_rows(const GemmStep& s, const LoweredStep& l, const GemmCall& call,
                         const GemmArgs& g, const ReduceScatterStep& rs);
  template <typename T>
  const T& ring_collective(const GemmCall& call) const;
  void permute(const PermuteStep& s, const LoweredStep& l);
  void collective(const Step& s);
  void scale_update(const ScaleUpdateStep& s, const LoweredStep& l);
  void epilogue(const EpilogueStep& s, const LoweredStep& l);
  void grad_epilogue(const GradEpilogueStep& s, const LoweredStep& l);
  void dbias_reduce(const LoweredStep& l, int dbias, int tiles, int cols);
  // The arguments that dequantize FP8 tensor `id` (its scales, segments) into `out`.
  DequantizeArgs dequantize_args(int id, CUdeviceptr out) const;
  GemmOperand operand(int id, int k_dim) const;
  GemmOperand dequantized_operand(int id, int k_dim, const DequantizeKernel& k, CUdeviceptr into);
  CUdeviceptr k_block_major_scales(const LoweredStep& l, LaunchRole role, int id, GemmOperand& op,
                                   CUdeviceptr into);
  CUdeviceptr padded_tile_scales(bool pad, GemmOperand& op, CUdeviceptr into);
  Slot slot(int scale_tensor) const;
  Slot state_slot(int scale_tensor) const;  // a delayed scale's pair in the state
  CUdeviceptr at(int id) const { return addresses_.at(static_cast<std::size_t>(id)); }
  void zero(CUdeviceptr p, std::size_t bytes);
  void enqueue_nan_verdict();
  void verdict_enqueued();
  // Runs `enqueue` (one or more passes) through `graph` where graphs can
  // serve `passes`, else directly.
  void run_graph(PassGraph& graph, std::initializer_list<const std::vector<LoweredStep>*> passes,
                 const std::function<void()>& enqueue);

  const Layer& layer_;
  const LayerPlan& plan_;
  const LoweredLayer& lowered_;
  RankResources r_;
  DeviceLayerState& state_;
  DeviceBuffer arena_;
  DeviceBuffer scratch_;          // dbias tile partials
  DeviceBuffer operand_scratch_;  // dequantized GEMM operands
  DeviceBuffer scale_scratch_;    // block scales as cuBLASLt reads them
  DeviceBuffer staging_;          // dz before a block quantize that fuses no dact
  DeviceBuffer ring_sums_;        // overlap = ring: running sums received and sent
  DeviceBuffer gemm_staging_;     // a dgrad's output before gradient_after_gemm makes dz
  std::vector<std::unique_ptr<Event>> ring_events_;
  const std::vector<Step>* pass_steps_ = nullptr;  // the pass run_pass is in
  bool gemms_only_ = false;                        // ... and whether it runs GEMMs alone
  std::uint64_t passes_run_ = 0;
  DeviceBuffer verdict_;           // NaN verdict: the watched amaxes, then their group MAX
  PinnedHostBuffer verdict_host_;  // ... as the host reads them
  Event verdict_ready_;
  bool verdict_pending_ = false;
  std::vector<CUdeviceptr> addresses_;
  std::vector<bool> state_view_;         // the address is in DeviceLayerState
  std::vector<ScalePair> bound_scales_;  // bind_scale's pairs (zero: the arena's)
  std::vector<bool> written_;
  StepProfiler* profiler_ = nullptr;
  bool skip_collectives_ = false;
  bool preparing_ = false;  // prepare_gemms(): build each call's args, launch nothing
  // Overlap: one event per step of a pass (recorded where the pass uses
  // more than one stream), and the fork and join of the pass's streams.
  std::vector<std::unique_ptr<Event>> step_events_;
  std::unique_ptr<Event> fork_, join_;
  bool weight_cached_ = false;
  DeviceBuffer weight_scales_;           // the weight cache's scale pairs, 32 bytes each
  std::vector<ScalePair> weight_scale_;  // per scale tensor: its pair there (zero: none)
  bool graphs_ = false;
  PassGraph forward_graph_, backward_graph_;
  GraphCounts graph_counts_;
};

}  // namespace fp8c::runtime
