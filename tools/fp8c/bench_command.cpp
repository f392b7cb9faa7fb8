// fp8c bench: one training step of each layer on this GPU, timed, with a
// breakdown per kernel, GEMM and collective (runtime/gpu/layer_bench.hpp).

#include <iostream>
#include <optional>

#include "codegen/plan/planner.hpp"
#include "runtime/cubin_cache.hpp"
#include "runtime/dynamic_library.hpp"
#include "runtime/gpu/layer_bench.hpp"
#include "runtime/gpu/rank_executor.hpp"
#include "tools/fp8c/commands.hpp"

namespace fp8c::tools {
namespace {

constexpr std::string_view kBenchHelp =
    "usage: fp8c bench FILE [--tokens M] [--iters N] [--layer L] [--device D]\n"
    "                       [--gemm auto|cublaslt|generated]\n"
    "\n"
    "Runs each layer of FILE on one GPU (one rank: tensor_parallel planned as 1)\n"
    "for N timed training steps (forward, backward, scale update) after a warm-up,\n"
    "with two sets of random inputs used in turn, and prints per layer the median\n"
    "step time (each pass one CUDA graph launch, as a Session runs it), the same\n"
    "steps launched one by one, the median time of the step's GEMMs run alone on\n"
    "the same buffers, their ratio, and a breakdown per step (kernel, GEMM,\n"
    "collective) measured with CUDA events inside whole steps.\n"
    "\n"
    "  --tokens M   tokens of a step (default 8192)\n"
    "  --iters N    timed steps (default 30)\n"
    "  --layer L    only layer L\n"
    "  --device D   CUDA device ordinal (default 0)\n"
    "  --gemm G     run every layer's FP8 GEMMs on G (auto, cublaslt, or generated:\n"
    "               fp8c's own, sm_90a) instead of what each layer's `gemm =` says\n"
    "\n"
    "Exit status: 0 done, 1 no GPU or the spec cannot run, 2 usage error.\n";

int run_bench(const Args& args) {
  std::string file;
  runtime::LayerBenchOptions options;
  std::uint64_t device = 0;
  std::optional<GemmBackend> gemm;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--layer") {
      if (i + 1 >= args.size()) return usage_error("bench", "--layer needs a value");
      options.layer = args[++i];
    } else if (a == "--gemm") {
      if (i + 1 >= args.size()) return usage_error("bench", "--gemm needs a value");
      GemmBackend b;
      if (!parse_gemm_backend(args[++i], b))
        return usage_error("bench",
                           "--gemm must be auto, cublaslt or generated, not '" + args[i] + "'");
      gemm = b;
    } else if (a == "--tokens" || a == "--iters" || a == "--device") {
      std::uint64_t n = 0;
      if (i + 1 >= args.size() || !parse_count(args[i + 1], n, a == "--device"))
        return usage_error("bench", a + " needs a positive integer");
      ++i;
      if (a == "--tokens")
        options.tokens = n;
      else if (a == "--iters")
        options.iterations = static_cast<int>(std::min<std::uint64_t>(n, 100000));
      else
        device = n;
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error("bench", "unknown option '" + a + "'");
    } else if (file.empty()) {
      file = a;
    } else {
      return usage_error("bench", "more than one file given");
    }
  }
  if (file.empty()) return usage_error("bench", "no file given");
  std::optional<Spec> spec = load_spec_reporting(file);
  if (!spec) return 1;
  if (gemm) set_gemm_backend(*spec, *gemm);
  if (!options.layer.empty() && !spec->find_layer(options.layer)) {
    std::cerr << "fp8c bench: " << file << ": no layer '" << options.layer << "'\n";
    return 1;
  }
  try {
    runtime::Device gpu(static_cast<int>(device));
    runtime::Jit jit(gpu.arch(), runtime::CubinCache(runtime::CubinCache::default_directory()),
                     spec->backend);
    const auto results = runtime::bench_layers(*spec, gpu, jit, options);
    std::cout << gpu.name() << "\n" << runtime::format_bench(results, true);
    return 0;
  } catch (const runtime::Unavailable& e) {
    std::cerr << "fp8c bench: needs a GPU: " << e.what() << "\n";
  } catch (const PlanError& e) {
    std::cerr << "fp8c bench: " << file << ": " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "fp8c bench: " << file << ": " << e.what() << "\n";
  }
  return 1;
}

}  // namespace

const std::vector<Command>& bench_commands() {
  static const std::vector<Command> commands = {
      {"bench", "time a training step of each layer on the GPU, per kernel and GEMM", kBenchHelp,
       run_bench},
  };
  return commands;
}

}  // namespace fp8c::tools
