// The CPU reference executor: runs every step of a LayerPlan for real, one
// thread per rank, each with its own Communicator (gloo over loopback, or
// the in-process backend). Numbers follow the GPU kernels: bit-exact FP8 /
// E8M0 / bf16 conversions (codegen/numerics), fp32 GEMM accumulation, high-
// precision tensors rounded on every store. No GPU and no CUDA library.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/plan/plan.hpp"
#include "collectives/communicator.hpp"
#include "collectives/run_ranks.hpp"
#include "fp8c/spec.hpp"

namespace fp8c::cpu {

// The global, unsharded tensors of one training step, as floats that are
// exactly representable in the layer dtype. Row-major.
struct LayerData {
  std::vector<float> x;   // [tokens][in]
  std::vector<float> w;   // [out][in]
  std::vector<float> b;   // [out], empty without bias
  std::vector<float> dy;  // [tokens][out]
};

// Fresh random data (uniform in [-1, 1), rounded to the layer dtype) for a
// layer and token count; the same seed gives the same data on every call.
LayerData random_layer_data(const Layer& layer, std::uint64_t tokens, std::uint64_t seed);

// Delayed scaling state of one quantized tensor (x, w, dy or dz, ...).
struct DelayedScale {
  float scale = 1.0f;          // the multiplier the next quantize applies
  std::vector<float> history;  // amax history, newest first
  bool operator==(const DelayedScale&) const = default;
};

// What persists across steps on one rank; identical initial state on all
// ranks (weights and bias come with LayerData each step).
struct LayerState {
  std::map<std::string, DelayedScale> delayed;  // by tensor key: "x", "w", "dz", ...
  bool operator==(const LayerState&) const = default;
};

LayerState initial_state(const Layer& layer);

// One executed step, for tests that inspect what ran.
struct ExecutedStep {
  std::string pass;  // forward, backward, update
  StepKind kind = StepKind::gemm;
  bool rowwise = false, columnwise = false;
  std::vector<std::string> inputs, outputs;
  // debug statistics of a quantize / dequantize with `stats`
  float amax = 0.0f;
  float scale = 0.0f;
  std::uint64_t underflows = 0, overflows = 0;
};

// One rank's results of one step, as logical row-major floats of its local
// shard (dims as the plan's tensors say).
struct RankStepResult {
  std::vector<float> y, dx, dw, db;
  std::array<Dim, 2> y_dims, dx_dims, dw_dims, db_dims;
  // The pre-activation as forward made it (before any replacement).
  std::vector<float> z;
  std::array<Dim, 2> z_dims;
  LayerState state;  // after the update pass
  std::vector<ExecutedStep> executed;
  // Tensors named in ExecutorOptions::capture, as they were at the end of
  // the step: raw bytes as stored (segments and all) and, for FP8 data and
  // high-precision tensors, logical values (dequantized with their scales).
  struct Captured {
    std::vector<std::uint8_t> bytes;
    std::vector<float> logical;
  };
  std::map<std::string, Captured> captured;
};

// A tensor's contents replaced on every rank at a point of the step: the
// oracle's one-rank run takes the N-rank run's pre-activation (row layers
// with an activation) or a chain's handed-over tensors, so what follows
// compares exactly.
struct Replacement {
  enum class When { before_forward, before_backward };
  When when = When::before_backward;
  int rank = -1;                    // only this rank's tensor; -1: every rank's
  int tensor = kNoTensor;           // id in the plan being run
  std::vector<float> values;        // high-precision tensors: logical values
  std::vector<std::uint8_t> bytes;  // any tensor: its bytes as stored (used when values is empty)
};

struct ExecutorOptions {
  collectives::Backend backend = collectives::Backend::kGloo;
  std::chrono::milliseconds timeout{60'000};
  // Run the plan even when check_plan rejects it (tests that show what a
  // broken plan computes). Off: a rejected plan is an ExecutorError.
  bool skip_plan_check = false;
  // Fault injection for tests: this rank skips its first collective.
  int skip_collective_on_rank = -1;
  // Full tensor names (e.g. "l.x.fp8.col.gathered") to return per step.
  std::vector<std::string> capture;
  // Per step (index = step): the replacements of that step.
  std::vector<std::vector<Replacement>> replace;
};

class ExecutorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs `steps.size()` training steps of `layer` under `plan` (all of the
// plan's ranks as threads). Returns [rank][step]. Throws ExecutorError for a
// plan it cannot run, and rethrows a rank's CollectiveError (a hung or
// mismatched collective fails within the timeout instead of hanging).
std::vector<std::vector<RankStepResult>> run_layer(const Layer& layer, const LayerPlan& plan,
                                                   const std::vector<LayerData>& steps,
                                                   const ExecutorOptions& options = {});

class TensorStore;

// The result of one step read from a rank's tensors (what execute_layer_step
// returns, less `executed`). Shared with the GPU executor, which downloads
// its buffers into a TensorStore so both are read the same way.
RankStepResult collect_step_result(const Layer& layer, const TensorStore& store,
                                   const LayerState& state,
                                   const std::vector<std::string>& capture);

// Writes a rank's external tensors (its shards of x, w, b, dy, the delayed
// scales from `state`, a chained FP8 input quantized as its producer would
// have) into `store`; the GPU executor uploads them from there. with_x /
// with_dy false: that input is handed over in a chain, not taken from data.
void fill_external_tensors(const Layer& layer, TensorStore& store, const LayerState& state,
                           const LayerData& data, int rank, bool with_x = true,
                           bool with_dy = true);

// A producer whose consumer hands it FP8 dz (LayerIo::dy_fp8_col set), run
// without that consumer: writes dz = dy * act'(z) from its shard of
// `data.dy` and its own saved z in `store`, with the amax, the columnwise
// copy and the bias gradient, as the consumer's dgrad epilogue would (its
// arithmetic: fp32, then the FP8 store with the delayed scale in `store`).
// Call after forward, before backward. Does nothing for other plans.
void stand_in_handed_gradient(const Layer& layer, TensorStore& store, const LayerData& data,
                              int rank);

// One step on one rank with a communicator the caller owns.
RankStepResult execute_layer_step(const Layer& layer, const LayerPlan& plan,
                                  collectives::Communicator& comm, const LayerData& data,
                                  LayerState& state, int skip_collective = -1,
                                  const std::vector<std::string>& capture = {},
                                  const std::vector<Replacement>& replace = {});

// A producer -> consumer chain (`input =`): the consumer's input is the
// producer's output on each rank (its FP8 output with the consumer's delayed
// scale when chained in FP8), the producer's dY is the consumer's dX. Only
// layouts whose tensors hand over without redistribution (column -> row,
// row -> column with matching sequence parallelism) run; others are an
// ExecutorError.
struct ChainData {
  LayerData first;   // x, w, b used
  LayerData second;  // w, b, dy used
};
struct ChainStepResult {
  RankStepResult first, second;
};
// `replace[step]`: Replacement lists for each layer (before_forward is
// applied after the hand-over of the consumer's input, before_backward after
// the hand-over of the producer's dY, and of its pre-activation to a
// consumer that hands it FP8 dz).
struct ChainReplacements {
  std::vector<Replacement> first, second;
};
std::vector<std::vector<ChainStepResult>> run_chain(
    const Layer& first, const LayerPlan& first_plan, const Layer& second,
    const LayerPlan& second_plan, const std::vector<ChainData>& steps,
    const ExecutorOptions& options = {}, const std::vector<ChainReplacements>& replace = {});

}  // namespace fp8c::cpu
