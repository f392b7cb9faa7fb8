// GPU benchmark of one FP8 linear layer, forward + backward (fprop, dgrad,
// wgrad) + scale update, through the GPU executor (a benchmark, not a test).
// Per shape and recipe: the whole step's median time and the median time of
// the same GEMMs run alone through cuBLASLt on the same buffers; the issue's
// target is step <= 1.08 x GEMMs. Correctness of the same executor against
// the CPU reference is the GPU tests' business (tests/gpu).
//
//   build/bench/layer_bench [--iters N] [--json FILE] [--only M,K,N]
//
// Shapes (tokens, in, out): (16384, 8192, 8192), (16384, 8192, 28672),
// (8192, 4096, 4096); bf16 in and out, no bias, no activation, as the
// PyTorch peers in bench/peers/layer_peers.py.

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fp8c/dsl.hpp"
#include "runtime/gpu/layer_bench.hpp"

using namespace fp8c;
using namespace fp8c::runtime;

namespace {

struct Shape {
  std::uint64_t tokens, in, out;
};

Spec layer_spec(const Shape& s, const std::string& recipe) {
  const std::string text = "layer l = linear { in = " + std::to_string(s.in) +
                           "  out = " + std::to_string(s.out) + "  recipe = " + recipe + " }\n";
  auto r = check_source(SourceFile("bench.fp8", text));
  if (!r.spec) throw std::runtime_error("bench: bad spec " + text);
  return *r.spec;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 30;
  std::string json_path, only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc)
      iters = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else {
      std::fprintf(stderr, "usage: layer_bench [--iters N] [--json FILE] [--only M,K,N]\n");
      return 2;
    }
  }
  try {
    Device device(0);
    const auto cache = std::filesystem::temp_directory_path() / "fp8c-bench-cache";
    Jit jit(device.arch(), CubinCache(cache.string()));
    std::ostringstream json;
    json << "{\"benchmark\": \"layer\", \"device\": \"" << device.name() << "\", \"cases\": [";
    bool first = true;
    for (const Shape& s :
         {Shape{16384, 8192, 8192}, Shape{16384, 8192, 28672}, Shape{8192, 4096, 4096}}) {
      const std::string key =
          std::to_string(s.tokens) + "," + std::to_string(s.in) + "," + std::to_string(s.out);
      if (!only.empty() && only != key) continue;
      for (const std::string recipe : {"delayed", "current"}) {
        LayerBenchOptions o;
        o.tokens = s.tokens;
        o.iterations = iters;
        const auto results = bench_layers(layer_spec(s, recipe), device, jit, o);
        std::cout << "== " << recipe << " " << key << "\n" << format_bench(results, true);
        for (const auto& r : results) {
          json << (first ? "" : ",") << "\n  {\"name\": \"" << recipe << "_" << s.tokens << "x"
               << s.in << "x" << s.out << "\", \"recipe\": \"" << recipe
               << "\", \"tokens\": " << s.tokens << ", \"in\": " << s.in << ", \"out\": " << s.out
               << ", \"step_ms\": " << r.step_ms
               << ", \"graphs\": " << (r.graphed ? "true" : "false")
               << ", \"eager_step_ms\": " << r.eager_step_ms << ", \"gemm_ms\": " << r.gemm_ms
               << ", \"ratio_to_gemms\": " << r.ratio() << ", \"breakdown\": [";
          for (std::size_t i = 0; i < r.breakdown.size(); ++i)
            json << (i ? ", " : "") << "{\"step\": \"" << r.breakdown[i].label
                 << "\", \"ms\": " << r.breakdown[i].milliseconds << "}";
          json << "]}";
          first = false;
        }
      }
    }
    json << "\n]}\n";
    if (!json_path.empty()) std::ofstream(json_path) << json.str();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "layer_bench: %s\n", e.what());
    return 1;
  }
}
