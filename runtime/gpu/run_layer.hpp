// Runs a layer's plan on one GPU with every rank of its tensor-parallel
// group as a host thread (single-GPU multi-rank mode), and returns what the
// CPU reference executor returns for the same data, so the two compare
// directly: `fp8c verify --device gpu` and the GPU tests use this.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {

class DeviceCommunicator;

struct GpuRunOptions {
  std::chrono::milliseconds timeout{60'000};
  std::vector<std::string> capture;  // full tensor names, as cpu::ExecutorOptions::capture
  // Fault injection for tests: this rank's first step fails before its first
  // collective (its peers must end with an error, not hang).
  int fail_rank = -1;
  // For tests: each rank's communicator of the single-GPU group, wrapped
  // (one whose data lands later on its stream than the group's does, to
  // show that every wait between the streams is there).
  std::function<std::unique_ptr<DeviceCommunicator>(std::unique_ptr<DeviceCommunicator>)> wrap;
};

// [rank][step]. Each rank starts from `initial` state (empty: the recipe's
// initial state). Throws ExecutorError for a plan it cannot run and the
// first rank's error otherwise.
std::vector<std::vector<cpu::RankStepResult>> run_layer_on_gpu(
    const Device& device, const Jit& jit, const Layer& layer, const LayerPlan& plan,
    const std::vector<cpu::LayerData>& steps, const GpuRunOptions& options = {},
    const cpu::LayerState& initial = {});

class KernelSet;

// One rank's steps with a communicator the caller owns (NCCL, one process
// per GPU; or one of a LocalDeviceGroup's). The device's context must be
// current. Returns this rank's results, one per step.
std::vector<cpu::RankStepResult> run_rank_on_gpu(const KernelSet& kernels, DeviceCommunicator& comm,
                                                 const Layer& layer, const LayerPlan& plan,
                                                 const std::vector<cpu::LayerData>& steps,
                                                 const GpuRunOptions& options = {},
                                                 const cpu::LayerState& initial = {});

}  // namespace fp8c::runtime
