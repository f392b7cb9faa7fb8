#include "runtime/gpu/layer_bench.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "codegen/plan/planner.hpp"
#include "collectives/device/local_device_group.hpp"
#include "runtime/gemm/gemm.hpp"
#include "runtime/gemm/generated_gemm.hpp"
#include "runtime/gpu/kernel_set.hpp"
#include "runtime/gpu/layer_state.hpp"
#include "runtime/gpu/rank_executor.hpp"

namespace fp8c::runtime {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A device buffer of uniform random values in [-range, range), generated
// on the host with a cheap generator (the values only need to be varied).
DeviceBuffer random_buffer(const Tensor& t, std::uint64_t seed, float range) {
  const std::size_t n = t.elements();
  DeviceBuffer b(std::max<std::size_t>(t.bytes(), 4));
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  const auto next = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (static_cast<float>(s >> 40) / 16777216.0f * 2.0f - 1.0f) * range;
  };
  if (t.type == ElemType::fp32) {
    std::vector<float> v(n);
    for (auto& x : v) x = next();
    b.upload(v.data(), n * 4);
  } else if (is_fp8(t.type)) {  // a gradient handed over in FP8 (its scale stays 1)
    std::vector<std::uint8_t> v(n);
    for (auto& x : v) x = numerics::float_to_fp8(next(), t.type, numerics::Saturation::satfinite);
    b.upload(v.data(), n);
  } else {
    std::vector<std::uint16_t> v(n);
    for (auto& x : v)
      x = t.type == ElemType::bf16 ? numerics::float_to_bf16(next())
                                   : numerics::float_to_fp16(next());
    b.upload(v.data(), n * 2);
  }
  return b;
}

}  // namespace

std::vector<LayerBenchResult> bench_layers(const Spec& spec, const Device& device, const Jit& jit,
                                           const LayerBenchOptions& o) {
  device.make_current();
  PlanOptions po;
  po.ranks = o.comm ? static_cast<std::uint32_t>(o.comm->size()) : 1u;
  po.tokens = o.tokens;
  const Plan plan = plan_spec(spec, po);
  std::unique_ptr<LocalDeviceGroup> group;
  std::unique_ptr<DeviceCommunicator> own;
  if (!o.comm) {
    group = std::make_unique<LocalDeviceGroup>(1, std::chrono::milliseconds(60'000), jit);
    own = group->communicator(0);
  }
  DeviceCommunicator* comm = o.comm ? o.comm : own.get();
  auto gemm = make_cublaslt_runner();
  auto generated = make_generated_gemm_runner(jit);
  Stream stream, comm_stream, side_stream;
  std::vector<LayerBenchResult> results;
  for (const auto& lp : plan.layers) {
    if (!o.layer.empty() && lp.layer != o.layer) continue;
    const Layer& layer = *spec.find_layer(lp.layer);
    if (lp.io.x_fp8 != kNoTensor)
      throw ExecutorError("bench: layer '" + layer.name +
                          "' takes an FP8 input from its producer; bench it with output = bf16");
    const LoweredLayer lowered = lower_for_gpu(layer, lp, cublaslt_lower_options());
    KernelSet kernels(jit, lowered.kernels);
    DeviceLayerState state(layer, lp);
    GpuRankExecutor exec(layer, lp, lowered,
                         {kernels, *comm, *gemm, stream.get(), comm_stream.get(), generated.get(),
                          side_stream.get()},
                         state);
    exec.prepare_gemms();  // as a Session does: no compile inside a timed step
    // Before the first pass, as a Session does: a graph captured without the
    // cache's scale pair would be replayed for a micro-batch that casts.
    if (o.micro_batches > 1) exec.enable_weight_cache();
    // Two sets of inputs, used in turn.
    std::map<int, std::vector<DeviceBuffer>> inputs;
    // A producer whose consumer's dgrad hands it FP8 dz: its dz, columnwise
    // copy and bias gradient are random too (their making is timed in the
    // consumer's step, which `bench` cannot run alone: chain_bench times
    // both).
    for (const int id : {lp.io.x, lp.io.w, lp.io.b, lp.io.dy, lp.io.dy_fp8_col, lp.io.dy_db}) {
      if (id == kNoTensor) continue;
      const Tensor& t = lp.tensor(id);
      const bool grad = t.quantity == Quantity::dy || t.quantity == Quantity::dz;
      const int salt = static_cast<int>(t.quantity) * 37 + 11;
      for (int copy = 0; copy < 2; ++copy)
        inputs[id].push_back(random_buffer(t, copy * 131 + salt, grad ? 1e-3f : 1.0f));
    }
    const auto bind = [&](int i) {
      for (auto& [id, buffers] : inputs)
        exec.bind(id, buffers[static_cast<std::size_t>(i % 2)].get());
    };
    Event start, stop;
    const auto timed = [&](auto&& body) {
      start.record(stream.get());
      body();
      stop.record(stream.get());
      stop.synchronize();
      return static_cast<double>(stop.since(start));
    };
    const auto whole_step = [&] {
      exec.forward();
      exec.backward_and_update();
    };
    // Steps as graph launches and launched one by one, interleaved so that
    // both see the same clocks (a long run heats the GPU).
    std::vector<double> steps, eager_steps, gemms;
    for (const bool graphs : {false, o.graphs}) {
      exec.set_graphs(graphs);
      for (int i = 0; i < o.warmup; ++i) {
        bind(i);
        whole_step();
      }
    }
    exec.synchronize();
    for (int i = 0; i < o.iterations; ++i)
      for (const bool graphs : {false, o.graphs}) {
        exec.set_graphs(graphs);
        bind(i);
        (graphs ? steps : eager_steps).push_back(timed(whole_step));
      }
    const auto counts = exec.graph_counts();
    const bool graphed = o.graphs && counts.replayed > 0;
    exec.set_graphs(false);
    for (int i = 0; i < o.iterations; ++i) {
      bind(i);
      gemms.push_back(timed([&] { exec.run_gemms_only(); }));
    }
    // The same steps without their collectives: what communication adds.
    std::vector<double> compute;
    if (comm->size() > 1) {
      exec.set_skip_collectives(true);
      for (int i = 0; i < o.iterations; ++i) {
        bind(i);
        compute.push_back(timed(whole_step));
      }
      exec.set_skip_collectives(false);
    }
    // Per-step breakdown inside whole steps.
    StepProfiler profiler;
    std::map<std::string, std::vector<double>> per_step;
    std::vector<StepTiming> order;
    exec.set_profiler(&profiler);
    for (int i = 0; i < std::min(o.iterations, 10); ++i) {
      profiler.reset();
      bind(i);
      whole_step();
      exec.synchronize();
      const auto t = profiler.timings();
      if (order.empty()) order = t;
      for (const auto& s : t) per_step[s.label].push_back(s.milliseconds);
    }
    exec.set_profiler(nullptr);
    // Gradient accumulation: micro-batches of one weight (copy 0), x and dy
    // rotating, with the weight cast once and every time, in turn.
    double cached_ms = 0, every_ms = 0;
    if (o.micro_batches > 1) {
      exec.set_graphs(o.graphs);
      const auto accumulate = [&](bool cache) {
        for (int m = 0; m < o.micro_batches; ++m) {
          for (auto& [id, buffers] : inputs)
            exec.bind(id, buffers[id == lp.io.w ? 0 : static_cast<std::size_t>(m % 2)].get());
          exec.set_weight_cached(cache && m > 0);
          whole_step();
        }
      };
      std::vector<double> cached, every;
      for (int i = 0; i < 3; ++i) accumulate(i % 2 == 0);
      exec.synchronize();
      const int rounds = std::max(3, o.iterations / o.micro_batches);
      for (int i = 0; i < rounds; ++i) {
        cached.push_back(timed([&] { accumulate(true); }));
        every.push_back(timed([&] { accumulate(false); }));
      }
      exec.set_weight_cached(false);
      exec.set_graphs(false);
      cached_ms = median(cached);
      every_ms = median(every);
    }
    LayerBenchResult r;
    r.micro_batches = o.micro_batches > 1 ? o.micro_batches : 0;
    r.accumulate_cached_ms = cached_ms;
    r.accumulate_every_ms = every_ms;
    // The weight-only steps' times in the breakdown ("LAYER PASS I ..." labels).
    for (const auto& [pass, low] :
         {std::pair{"forward", &lowered.forward}, std::pair{"backward", &lowered.backward}})
      for (std::size_t i = 0; i < low->size(); ++i) {
        if (!(*low)[i].weight_only) continue;
        const std::string prefix = layer.name + " " + pass + " " + std::to_string(i) + " ";
        for (const auto& s : order)
          if (s.label.rfind(prefix, 0) == 0) r.weight_cast_ms += median(per_step[s.label]);
      }
    r.layer = layer.name;
    r.tokens = o.tokens;
    r.in = layer.in;
    r.out = layer.out;
    r.step_ms = median(steps);
    r.eager_step_ms = median(eager_steps);
    r.graphed = graphed;
    r.graph_eager = counts.eager;
    r.graph_captured = counts.captured;
    r.graph_replayed = counts.replayed;
    r.gemm_ms = median(gemms);
    r.flops = 6.0 * double(o.tokens) * double(layer.in) * double(layer.out);
    for (auto& s : order) {
      s.milliseconds = static_cast<float>(median(per_step[s.label]));
      if (is_collective(s.kind)) r.comm_ms += s.milliseconds;
      r.breakdown.push_back(s);
    }
    r.compute_ms = compute.empty() ? r.step_ms : median(compute);
    results.push_back(std::move(r));
  }
  return results;
}

std::string format_bench(const std::vector<LayerBenchResult>& results, bool breakdown) {
  std::ostringstream out;
  char line[256];
  for (const auto& r : results) {
    std::snprintf(
        line, sizeof line,
        "layer %s (%llu tokens, in %llu, out %llu): step %.3f ms, its GEMMs alone %.3f ms, "
        "ratio %.3f, %.0f TFLOP/s over the step\n",
        r.layer.c_str(), static_cast<unsigned long long>(r.tokens),
        static_cast<unsigned long long>(r.in), static_cast<unsigned long long>(r.out), r.step_ms,
        r.gemm_ms, r.ratio(), r.flops / (r.step_ms * 1e-3) / 1e12);
    out << line;
    std::snprintf(line, sizeof line,
                  "  %s (passes: %d eager, %d captured, %d replayed); launched one by one %.3f ms "
                  "(ratio %.3f)\n",
                  r.graphed ? "passes as CUDA graphs" : "no pass as a CUDA graph", r.graph_eager,
                  r.graph_captured, r.graph_replayed, r.eager_step_ms,
                  r.gemm_ms > 0 ? r.eager_step_ms / r.gemm_ms : 0.0);
    out << line;
    if (r.micro_batches > 1) {
      std::snprintf(line, sizeof line,
                    "  %d micro-batches of one weight: weight cast once %.3f ms, every time "
                    "%.3f ms (saved %.3f ms; the weight's casts take %.3f ms a step)\n",
                    r.micro_batches, r.accumulate_cached_ms, r.accumulate_every_ms,
                    r.accumulate_every_ms - r.accumulate_cached_ms, r.weight_cast_ms);
      out << line;
    }
    if (r.comm_ms > 0) {
      const double exposed = std::max(0.0, r.step_ms - r.compute_ms);
      std::snprintf(line, sizeof line,
                    "  without collectives %.3f ms; collectives %.3f ms; exposed %.3f ms; "
                    "hidden %.0f%%\n",
                    r.compute_ms, r.comm_ms, exposed,
                    100.0 * std::max(0.0, 1.0 - exposed / r.comm_ms));
      out << line;
    }
    if (!breakdown) continue;
    double total = 0;
    for (const auto& s : r.breakdown) total += s.milliseconds;
    for (const auto& s : r.breakdown) {
      std::snprintf(line, sizeof line, "  %-60s %9.3f ms %5.1f%%\n", s.label.c_str(),
                    s.milliseconds, total > 0 ? 100.0 * s.milliseconds / total : 0.0);
      out << line;
    }
  }
  return out.str();
}

}  // namespace fp8c::runtime
