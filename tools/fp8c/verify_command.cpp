// fp8c verify: the distributed oracle on CPU ranks (runtime/cpu/verify.hpp).

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "codegen/plan/planner.hpp"
#include "collectives/device/nccl_bootstrap.hpp"
#include "collectives/device/nccl_communicator.hpp"
#include "collectives/gloo_communicator.hpp"
#include "fp8c/dsl.hpp"
#include "runtime/cpu/verify.hpp"
#include "runtime/cubin_cache.hpp"
#include "runtime/dynamic_library.hpp"
#include "runtime/gpu/gpu_verify.hpp"
#include "runtime/gpu/rank_executor.hpp"
#include "tools/fp8c/commands.hpp"

namespace fp8c::tools {
namespace {

constexpr std::string_view kVerifyHelp =
    "usage: fp8c verify FILE [--ranks N] [--tokens M] [--steps K] [--seed S]\n"
    "                        [--backend gloo|in-process] [--layer L] [--json] [--force]\n"
    "                        [--device cpu|gpu [--nccl] [--gemm auto|cublaslt|generated]]\n"
    "\n"
    "Runs each layer of FILE on CPU ranks (threads with gloo or in-process\n"
    "collectives) with its N-rank plan and with a 1-rank plan on the same block\n"
    "grid, on the same seeded random data (the 1-rank backward takes the N-rank\n"
    "pre-activation), assembles the N-rank shards and compares output,\n"
    "pre-activation, dX, dW and dbias: N ranks vs 1 rank bitwise where the\n"
    "arithmetic is the same, else element by element within a bound derived\n"
    "from the sums over the group; and each run against a float64 reference of\n"
    "the unquantized math. Over K steps, delayed-scaling scales and amax\n"
    "histories must be identical on all ranks and equal to the 1-rank run's,\n"
    "key by key. A one-rank layer has only the float64 rows.\n"
    "Prints a table: layer, check, max abs diff, rel err, tolerance, result\n"
    "(a FAIL says why). Bounds and rules: docs/verify.md.\n"
    "\n"
    "  --ranks N      tensor-parallel size (default: each layer's tensor_parallel)\n"
    "  --tokens M     tokens of a step (default 256; must divide by N under\n"
    "                 sequence parallelism)\n"
    "  --steps K      training steps (default 1)\n"
    "  --seed S       random data seed (default 1)\n"
    "  --backend B    gloo (TCP over loopback) or in-process (also: inproc).\n"
    "                 Default: gloo when its module, libfp8c_gloo.so, loads, else\n"
    "                 in-process with a note on stderr. FP8C_GLOO_MODULE=PATH\n"
    "                 names the module (search order: README.md)\n"
    "  --layer L      only layer L\n"
    "  --json         JSON instead of the table\n"
    "  --force        run layers above 2e10 GEMM FLOPs per step (slow on CPU)\n"
    "  --device gpu   run the N-rank plan on the GPU instead (all ranks on GPU 0,\n"
    "                 single-GPU multi-rank mode) and compare it with the CPU\n"
    "                 reference executor on the same data, per rank and step:\n"
    "                 FP8 data quantized from the inputs bitwise, outputs within\n"
    "                 bounds derived from both sides' GEMM operands, delayed state\n"
    "                 key by key (docs/runtime.md)\n"
    "  --nccl         with --device gpu: this process is one rank of a group\n"
    "                 started by a launcher (torchrun-style RANK, WORLD_SIZE,\n"
    "                 LOCAL_RANK, MASTER_ADDR, MASTER_PORT, or mpirun's; alone:\n"
    "                 one rank), on GPU LOCAL_RANK over NCCL; it checks its own\n"
    "                 rank against the CPU reference (scripts/launch_ranks.sh)\n"
    "  --gemm G       with --device gpu: run every layer's FP8 GEMMs on G\n"
    "                 (auto, cublaslt, or generated: fp8c's own, sm_90a) instead of\n"
    "                 what each layer's `gemm =` says\n"
    "\n"
    "Exit status: 0 every check passed, 1 a check failed or the spec cannot be\n"
    "verified as asked, 2 usage error.\n";

int run_verify(const Args& args) {
  std::string file;
  cpu::VerifyOptions options;
  std::optional<collectives::Backend> backend;  // as asked; unset: gloo if it loads
  bool json = false;
  bool on_gpu = false;
  bool nccl = false;
  std::optional<GemmBackend> gemm;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--force") {
      options.force = true;
    } else if (a == "--nccl") {
      nccl = true;
    } else if (a == "--layer" || a == "--backend" || a == "--device" || a == "--gemm") {
      if (i + 1 >= args.size()) return usage_error("verify", a + " needs a value");
      const std::string v = args[++i];
      if (a == "--gemm") {
        GemmBackend b;
        if (!parse_gemm_backend(v, b))
          return usage_error("verify",
                             "--gemm must be auto, cublaslt or generated, not '" + v + "'");
        gemm = b;
      } else if (a == "--device") {
        if (v != "cpu" && v != "gpu")
          return usage_error("verify", "--device must be cpu or gpu, not '" + v + "'");
        on_gpu = v == "gpu";
      } else if (a == "--layer") {
        options.layer = v;
      } else if (v == "gloo") {
        backend = collectives::Backend::kGloo;
      } else if (v == "in-process" || v == "inproc") {
        backend = collectives::Backend::kInProcess;
      } else {
        return usage_error("verify", "--backend must be gloo or in-process, not '" + v + "'");
      }
    } else if (a == "--ranks" || a == "--tokens" || a == "--steps" || a == "--seed") {
      std::uint64_t n = 0;
      if (i + 1 >= args.size() || !parse_count(args[i + 1], n, a == "--seed"))
        return usage_error("verify", a + " needs a positive integer");
      ++i;
      if (a == "--ranks") {
        if (n > 1024) return usage_error("verify", "--ranks is too large for CPU ranks");
        options.ranks = static_cast<std::uint32_t>(n);
      } else if (a == "--tokens") {
        options.tokens = n;
      } else if (a == "--steps") {
        if (n > 10000) return usage_error("verify", "--steps is too large");
        options.steps = static_cast<std::uint32_t>(n);
      } else {
        options.seed = n;
      }
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error("verify", "unknown option '" + a + "'");
    } else if (file.empty()) {
      file = a;
    } else {
      return usage_error("verify", "more than one file given");
    }
  }
  if (file.empty()) return usage_error("verify", "no file given");
  if (nccl && !on_gpu) return usage_error("verify", "--nccl needs --device gpu");
  if (gemm && !on_gpu) return usage_error("verify", "--gemm needs --device gpu");
  std::optional<Spec> loaded = load_spec_reporting(file);
  if (!loaded) return 1;
  if (gemm) set_gemm_backend(*loaded, *gemm);
  const Spec& spec = *loaded;
  if (on_gpu) {
    // The CPU reference beside the GPU runs its ranks in-process.
    options.executor.backend = collectives::Backend::kInProcess;
  } else if (backend) {
    // Asked for gloo and it does not load: an error (GlooUnavailable, exit 1)
    // from the first group, not a silent change of backend.
    options.executor.backend = *backend;
  } else if (const std::string why = collectives::gloo_unavailable_reason(); why.empty()) {
    options.executor.backend = collectives::Backend::kGloo;
  } else {
    // The GPU machine has no libgloo: the oracle still runs, on the other
    // CPU backend, which is bit-identical by contract (collectives/README.md).
    std::cerr << "fp8c verify: note: running the ranks in-process (--backend in-process) "
                 "because gloo is unavailable:\n"
              << why << "\n";
    options.executor.backend = collectives::Backend::kInProcess;
  }
  cpu::VerifyReport report;
  try {
    if (on_gpu && nccl) {
      const bool launched = std::getenv("WORLD_SIZE") || std::getenv("OMPI_COMM_WORLD_SIZE");
      const runtime::NcclBootstrap boot =
          launched ? runtime::nccl_bootstrap_from_process() : runtime::single_rank_bootstrap();
      runtime::Device device(boot.local_rank);
      runtime::Jit jit(device.arch(), runtime::CubinCache(runtime::CubinCache::default_directory()),
                       spec.backend);
      if (options.ranks && *options.ranks != static_cast<std::uint32_t>(boot.world_size)) {
        std::cerr << "fp8c verify: --ranks " << *options.ranks << " but the launcher started "
                  << boot.world_size << " ranks (WORLD_SIZE)\n";
        return 2;
      }
      auto comm = runtime::make_nccl_communicator(boot, boot.local_rank, options.executor.timeout);
      report = runtime::verify_rank_on_gpu(spec, options, device, jit, *comm);
    } else if (on_gpu) {
      runtime::Device device(0);
      runtime::Jit jit(device.arch(), runtime::CubinCache(runtime::CubinCache::default_directory()),
                       spec.backend);
      report = runtime::verify_spec_on_gpu(spec, options, device, jit);
    } else {
      report = cpu::verify_spec(spec, options);
    }
  } catch (const runtime::Unavailable& e) {
    std::cerr << "fp8c verify: --device gpu needs a GPU: " << e.what() << "\n";
    return 1;
  } catch (const runtime::ExecutorError& e) {
    std::cerr << "fp8c verify: " << file << ": " << e.what() << "\n";
    return 1;
  } catch (const collectives::CollectiveError& e) {
    std::cerr << "fp8c verify: " << file << ": " << e.what() << "\n";
    return 1;
  } catch (const collectives::LaunchEnvError& e) {
    std::cerr << "fp8c verify: --nccl: " << e.what() << "\n";
    return 1;
  } catch (const PlanError& e) {
    std::cerr << "fp8c verify: " << file << ": " << e.what() << "\n";
    return 1;
  } catch (const cpu::VerifyError& e) {
    std::cerr << "fp8c verify: " << file << ": " << e.what() << "\n";
    return 1;
  }
  if (json) {
    std::cout << cpu::report_to_json(report);
  } else {
    std::cout << cpu::format_report(report);
    std::cout << "\nbitwise where both runs do the same arithmetic; \"per element\": each "
                 "element within a bound derived from the sums that differ (tolerance shows "
                 "its relative size); vs float64: a relative bound from the formats on the "
                 "path (docs/verify.md)\n";
  }
  const std::size_t failed = static_cast<std::size_t>(std::count_if(
      report.checks.begin(), report.checks.end(), [](const auto& c) { return !c.pass; }));
  if (failed > 0) {
    std::cerr << "fp8c verify: " << file << ": " << failed << " of " << report.checks.size()
              << " checks failed\n";
    return 1;
  }
  if (!json)
    std::cout << "fp8c verify: " << file << ": all " << report.checks.size() << " checks passed\n";
  return 0;
}

}  // namespace

const std::vector<Command>& verify_commands() {
  static const std::vector<Command> commands = {
      {"verify", "run N-rank and 1-rank plans on CPU ranks and compare (the oracle)", kVerifyHelp,
       run_verify},
  };
  return commands;
}

}  // namespace fp8c::tools
