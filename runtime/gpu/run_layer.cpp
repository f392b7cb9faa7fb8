#include "runtime/gpu/run_layer.hpp"

#include <exception>
#include <memory>
#include <thread>

#include "codegen/plan/plan_check.hpp"
#include "collectives/device/local_device_group.hpp"
#include "runtime/cpu/executor.hpp"
#include "runtime/cpu/tensor_store.hpp"
#include "runtime/gemm/gemm.hpp"
#include "runtime/gemm/generated_gemm.hpp"
#include "runtime/gpu/kernel_set.hpp"
#include "runtime/gpu/layer_state.hpp"
#include "runtime/gpu/rank_executor.hpp"

namespace fp8c::runtime {

std::vector<cpu::RankStepResult> run_rank_on_gpu(const KernelSet& kernels, DeviceCommunicator& comm,
                                                 const Layer& layer, const LayerPlan& plan,
                                                 const std::vector<cpu::LayerData>& steps,
                                                 const GpuRunOptions& options,
                                                 const cpu::LayerState& initial) {
  const int r = comm.rank();
  Stream stream, comm_stream, side_stream;
  std::unique_ptr<GemmRunner> gemm = make_cublaslt_runner();
  std::unique_ptr<GeneratedGemmRunner> generated = make_generated_gemm_runner(kernels.jit());
  DeviceLayerState state(layer, plan);
  state.upload(initial);
  std::vector<cpu::RankStepResult> results;
  // One executor for every step, as a Session keeps one per layer.
  const LoweredLayer lowered = lower_for_gpu(layer, plan, cublaslt_lower_options());
  GpuRankExecutor exec(
      layer, plan, lowered,
      {kernels, comm, *gemm, stream.get(), comm_stream.get(), generated.get(), side_stream.get()},
      state);
  // As a Session starts: the generated GEMM's configurations compiled up
  // front. A step that needs one more is a configuration prepare_gemms()
  // missed, which would stall a Session's step on a compile: an error here,
  // so that every GPU verify checks it.
  exec.prepare_gemms();
  const std::size_t prepared = generated->loaded_kernels().size();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (i == 0 && r == options.fail_rank)
      throw ExecutorError("gpu executor: rank " + std::to_string(r) +
                          " failed on purpose (fault injection)");
    cpu::TensorStore host(plan);
    const cpu::LayerState before = state.download();
    cpu::fill_external_tensors(layer, host, before, steps[i], r);
    exec.upload_externals(host);
    exec.forward();
    if (plan.io.dy_fp8_col != kNoTensor) {
      // FP8 dz from a consumer that is not here: made on the host from dy
      // and this run's z, as the CPU reference makes it from the same z.
      exec.synchronize();
      exec.download(host);
      cpu::stand_in_handed_gradient(layer, host, steps[i], r);
      exec.upload_externals(host);
    }
    exec.backward();
    exec.update();
    exec.synchronize();
    exec.download(host);
    results.push_back(cpu::collect_step_result(layer, host, state.download(), options.capture));
  }
  if (generated->loaded_kernels().size() != prepared) {
    std::string m = "gpu executor: layer '" + layer.name +
                    "': a step compiled generated GEMM configurations that prepare_gemms() did "
                    "not:";
    for (const auto& k : generated->loaded_kernels()) m += " " + k.name;
    throw ExecutorError(m);
  }
  return results;
}

std::vector<std::vector<cpu::RankStepResult>> run_layer_on_gpu(
    const Device& device, const Jit& jit, const Layer& layer, const LayerPlan& plan,
    const std::vector<cpu::LayerData>& steps, const GpuRunOptions& options,
    const cpu::LayerState& initial) {
  if (auto errors = check_layer_plan(plan); !errors.empty()) {
    std::string m = "gpu executor: the plan of layer '" + plan.layer + "' is invalid:";
    for (const auto& e : errors) m += "\n  " + e;
    throw ExecutorError(m);
  }
  device.make_current();
  const KernelSet kernels(jit, lower_for_gpu(layer, plan, cublaslt_lower_options()).kernels);

  const int n = static_cast<int>(plan.ranks);
  LocalDeviceGroup group(n, options.timeout, jit);
  std::vector<std::unique_ptr<DeviceCommunicator>> comms;
  for (int r = 0; r < n; ++r)
    comms.push_back(options.wrap ? options.wrap(group.communicator(r)) : group.communicator(r));

  std::vector<std::vector<cpu::RankStepResult>> results(static_cast<std::size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      DeviceCommunicator& comm = *comms[static_cast<std::size_t>(r)];
      try {
        device.make_current();
        results[static_cast<std::size_t>(r)] =
            run_rank_on_gpu(kernels, comm, layer, plan, steps, options, initial);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        comm.abort("rank " + std::to_string(r) + " failed");
      }
    });
  }
  for (auto& t : threads) t.join();
  // The root cause: a rank's own error before its peers' follow-up ones.
  std::exception_ptr root, follow_up;
  for (auto& e : errors) {
    if (!e) continue;
    bool peer = false;
    try {
      std::rethrow_exception(e);
    } catch (const CollectiveError& c) {
      peer = c.kind() == collectives::FailureKind::kPeerFailed ||
             c.kind() == collectives::FailureKind::kPoisoned;
    } catch (...) {
    }
    std::exception_ptr& slot = peer ? follow_up : root;
    if (!slot) slot = e;
  }
  if (root) std::rethrow_exception(root);
  if (follow_up) std::rethrow_exception(follow_up);
  return results;
}

}  // namespace fp8c::runtime
