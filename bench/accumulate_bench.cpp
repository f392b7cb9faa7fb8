// GPU benchmark of gradient accumulation with the FP8 weight cache (a
// benchmark, not a test): N micro-batches of one layer with one weight,
// each a whole step (forward, backward, scale update) on new x and dy, with
// the weight cast once (`weight_cache`: the later micro-batches skip the
// weight-only steps) and cast every time, timed in turn; and the weight's
// casts' share of one step in the per-step breakdown, which is what each
// skipped cast should save. The goal: the cached micro-batches are
// faster than the uncached ones by at least (N - 1) times that share.
//
//   build/bench/accumulate_bench [SPEC] [--layer L] [--tokens M] [--micro-batches N]
//                                [--iters K] [--json FILE] [--commit SHA]
//
// Default: examples/gpt_mlp.fp8's fc1 at 4096 tokens, 4 micro-batches (one
// rank: tensor_parallel planned as 1), each pass a CUDA graph launch as a
// Session runs it. Correctness of the cached path is
// tests/gpu/session_graph_gpu_test.cpp's (SessionWeightCache.*).

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "fp8c/dsl.hpp"
#include "runtime/gpu/layer_bench.hpp"

using namespace fp8c;
using namespace fp8c::runtime;

int main(int argc, char** argv) {
  std::string spec_path = "examples/gpt_mlp.fp8", layer = "fc1", json_path, commit = "unknown";
  LayerBenchOptions o;
  o.tokens = 4096;
  o.micro_batches = 4;
  o.iterations = 40;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool value = i + 1 < argc;
    if (a == "--layer" && value)
      layer = argv[++i];
    else if (a == "--tokens" && value)
      o.tokens = std::stoull(argv[++i]);
    else if (a == "--micro-batches" && value)
      o.micro_batches = std::max(2, std::atoi(argv[++i]));
    else if (a == "--iters" && value)
      o.iterations = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json" && value)
      json_path = argv[++i];
    else if (a == "--commit" && value)
      commit = argv[++i];
    else if (!a.empty() && a[0] != '-')
      spec_path = a;
    else {
      std::fprintf(stderr,
                   "usage: accumulate_bench [SPEC] [--layer L] [--tokens M] [--micro-batches N] "
                   "[--iters K] [--json FILE] [--commit SHA]\n");
      return 2;
    }
  }
  try {
    Spec spec = load_spec(spec_path);
    o.layer = layer;
    Device device(0);
    const auto cache = std::filesystem::temp_directory_path() / "fp8c-bench-cache";
    Jit jit(device.arch(), CubinCache(cache.string()));
    const auto results = bench_layers(spec, device, jit, o);
    if (results.empty()) throw std::runtime_error("no layer '" + layer + "' in " + spec_path);
    std::cout << format_bench(results, true);
    const LayerBenchResult& r = results[0];
    const double saved = r.accumulate_every_ms - r.accumulate_cached_ms;
    const double goal = (r.micro_batches - 1) * r.weight_cast_ms;
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    std::ostringstream json;
    json << "{\"benchmark\": \"accumulate\", \"commit\": \"" << commit << "\", \"gpu\": \""
         << device.name() << "\", \"date\": \"" << date << "\", \"spec\": \"" << spec_path
         << "\", \"cases\": [\n  {\"name\": \"" << r.layer << "_" << r.tokens << "x" << r.in << "x"
         << r.out << "_x" << r.micro_batches << "\", \"micro_batches\": " << r.micro_batches
         << ", \"tokens\": " << r.tokens << ", \"in\": " << r.in << ", \"out\": " << r.out
         << ", \"ours_weight_cached_ms\": " << r.accumulate_cached_ms
         << ", \"peer\": \"the same micro-batches casting the weight every time\""
         << ", \"peer_ms\": " << r.accumulate_every_ms << ", \"ratio\": "
         << (r.accumulate_cached_ms > 0 ? r.accumulate_every_ms / r.accumulate_cached_ms : 0)
         << ", \"saved_ms\": " << saved << ", \"weight_cast_ms_per_step\": " << r.weight_cast_ms
         << ", \"goal_saved_ms\": " << goal
         << ", \"goal_met\": " << (saved >= goal ? "true" : "false") << "}\n]}\n";
    std::cout << json.str();
    if (!json_path.empty()) std::ofstream(json_path) << json.str();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accumulate_bench: %s\n", e.what());
    return 1;
  }
}
