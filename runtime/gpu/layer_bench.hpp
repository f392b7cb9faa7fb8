// One training step of each layer of a spec on one GPU (one rank), timed:
// the whole step (forward, backward, scale update) and, for the ratio the
// issue's target is stated in, the same GEMMs run alone on the same buffers.
// Medians of CUDA-event times; two sets of inputs used in turn so a step
// does not find the previous step's inputs in L2. `fp8c bench` and
// bench/layer_bench print it.
#pragma once

#include <string>
#include <vector>

#include "fp8c/spec.hpp"
#include "runtime/device.hpp"
#include "runtime/gpu/step_profiler.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {

class DeviceCommunicator;

struct LayerBenchOptions {
  std::uint64_t tokens = 8192;
  int warmup = 5;
  int iterations = 30;
  std::string layer;  // only this one; empty: every layer
  // Several ranks: this process's rank of `comm`'s group (NCCL, one process
  // per GPU); the spec is planned for comm->size() ranks. Null: one rank.
  DeviceCommunicator* comm = nullptr;
  // Steps as a Session runs them, each pass one CUDA graph launch (where it
  // can be captured); the same steps launched one by one are timed beside.
  bool graphs = true;
  // Gradient accumulation: also time this many micro-batches of one weight
  // (forward + backward + update each, new x and dy each) with the FP8
  // weight cache (the weight cast once) and with the weight cast every time.
  // 0: not timed.
  int micro_batches = 0;
};

struct LayerBenchResult {
  std::string layer;
  std::uint64_t tokens = 0, in = 0, out = 0;
  double step_ms = 0;        // median of whole steps (graphs where options.graphs)
  double eager_step_ms = 0;  // median of whole steps launched one by one
  bool graphed = false;      // step_ms's passes were graph launches
  int graph_eager = 0, graph_captured = 0, graph_replayed = 0;  // the executor's counts
  double gemm_ms = 0;                 // median of the GEMMs alone (all of them, one step's worth)
  double flops = 0;                   // GEMM FLOPs of one step
  double compute_ms = 0;              // median of whole steps with the collectives left out
  double comm_ms = 0;                 // the collectives' share of the per-step breakdown
  std::vector<StepTiming> breakdown;  // per step, medians, inside whole steps
  // options.micro_batches > 1: medians of the micro-batches of one weight,
  // weight cast once (cached) and every time (every), and the weight-only
  // steps' share of one step in the breakdown (what each skip saves).
  int micro_batches = 0;
  double accumulate_cached_ms = 0, accumulate_every_ms = 0, weight_cast_ms = 0;
  double ratio() const { return gemm_ms > 0 ? step_ms / gemm_ms : 0; }
};

std::vector<LayerBenchResult> bench_layers(const Spec& spec, const Device& device, const Jit& jit,
                                           const LayerBenchOptions& options);

std::string format_bench(const std::vector<LayerBenchResult>& results, bool breakdown);

}  // namespace fp8c::runtime
