// fp8c emit | compile: the generated kernels of a spec, as source and as
// CUBINs through NVRTC (no GPU needed).

#include <chrono>
#include <cstdio>
#include <iostream>

#include "codegen/backends/llvm/llvm_backend.hpp"
#include "codegen/lower/lowered.hpp"
#include "codegen/plan/planner.hpp"
#include "fp8c/dsl.hpp"
#include "runtime/jit.hpp"
#include "tools/fp8c/commands.hpp"

namespace fp8c::tools {
namespace {

struct KernelOptions {
  std::string file;
  std::string layer;
  std::string kernel;
  std::string arch = "sm_90a";
  std::string cache_dir;
  PlanOptions plan;
  unsigned threads = 0;
  std::optional<KernelBackend> backend;  // --backend; else the spec's `backend =`
  bool ir = false;                       // emit --ir
};

// Parses the options both commands share; returns a usage message or "".
std::string parse(const Args& args, KernelOptions& o, bool compile) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto value = [&]() -> const std::string* {
      return i + 1 < args.size() ? &args[++i] : nullptr;
    };
    const auto count = [&](std::uint64_t& out) {
      const std::string* v = value();
      if (!v || v->empty() || v->size() > 9 ||
          v->find_first_not_of("0123456789") != std::string::npos)
        return false;
      out = std::stoull(*v);
      return out > 0;
    };
    std::uint64_t n = 0;
    if (a == "--layer") {
      const std::string* v = value();
      if (!v) return "--layer needs a layer name";
      o.layer = *v;
    } else if (!compile && a == "--kernel") {
      const std::string* v = value();
      if (!v) return "--kernel needs a kernel name";
      o.kernel = *v;
    } else if (a == "--backend") {
      const std::string* v = value();
      if (!v || (*v != "nvrtc" && *v != "llvm")) return "--backend needs nvrtc or llvm";
      o.backend = *v == "llvm" ? KernelBackend::llvm : KernelBackend::nvrtc;
    } else if (!compile && a == "--ir") {
      o.ir = true;
    } else if (a == "--arch") {
      const std::string* v = value();
      if (!v || !parse_target(*v)) return "--arch needs an architecture such as sm_90a";
      o.arch = *v;
    } else if (compile && a == "--cache-dir") {
      const std::string* v = value();
      if (!v) return "--cache-dir needs a directory";
      o.cache_dir = *v;
    } else if (compile && a == "--threads") {
      if (!count(n) || n > 1024) return "--threads needs a positive integer up to 1024";
      o.threads = static_cast<unsigned>(n);
    } else if (a == "--ranks") {
      if (!count(n) || n > 65536) return "--ranks needs a positive integer up to 65536";
      o.plan.ranks = static_cast<std::uint32_t>(n);
    } else if (a == "--tokens") {
      if (!count(n)) return "--tokens needs a positive integer";
      o.plan.tokens = n;
    } else if (a.size() > 1 && a[0] == '-') {
      return "unknown option '" + a + "'";
    } else if (o.file.empty()) {
      o.file = a;
    } else {
      return "more than one file given";
    }
  }
  return o.file.empty() ? "no file given" : "";
}

// The spec's lowering (its kernels: exactly what a Session compiles), or
// nullopt after printing why there is none. Sets o.backend from the spec
// where the command line left it.
std::optional<LoweredPlan> lowered_kernels(KernelOptions& o, const char* command) {
  const std::optional<Spec> loaded = load_spec_reporting(o.file);
  if (!loaded) return std::nullopt;
  Spec spec = *loaded;
  if (!o.backend) o.backend = spec.backend;
  if (!o.layer.empty() && !spec.find_layer(o.layer)) {
    std::cerr << "fp8c " << command << ": " << o.file << " has no layer '" << o.layer << "'\n";
    return std::nullopt;
  }
  try {
    const Plan plan = plan_spec(spec, o.plan);
    LoweredPlan lowered = lower_plan(spec, plan);
    if (!o.layer.empty()) {
      // Only that layer's kernels (and what it cannot run).
      Plan one;
      one.tokens = plan.tokens;
      one.layers.push_back(*plan.find(o.layer));
      lowered = lower_plan(spec, one);
    }
    return lowered;
  } catch (const PlanError& e) {
    std::cerr << "fp8c " << command << ": " << e.what() << "\n";
    return std::nullopt;
  }
}

void report_unsupported(const LoweredPlan& lowered) {
  if (lowered.unsupported.empty()) return;
  std::cerr << "note: a Session refuses this spec on the GPU:\n";
  for (const auto& s : lowered.unsupported) std::cerr << "  " << s << "\n";
}

int run_emit(const Args& args) {
  KernelOptions o;
  if (auto error = parse(args, o, false); !error.empty()) return usage_error("emit", error);
  const auto kernels = lowered_kernels(o, "emit");
  if (!kernels) return 1;
  const bool llvm = *o.backend == KernelBackend::llvm;
  bool found = o.kernel.empty();
  for (const auto& p : kernels->kernels) {
    if (!o.kernel.empty() && p.kernel.name() != o.kernel) continue;
    found = true;
    const KernelSource k = emit_cuda(p.kernel);
    std::cout << "// ---- kernel " << p.kernel.name() << "\n";
    for (const auto& use : p.used_by) std::cout << "// used by " << use << "\n";
    if (!k.ir && (o.ir || llvm))
      std::cout << "// not built as kernel IR yet: CUDA C++ for NVRTC under either backend\n";
    try {
      if (o.ir && k.ir)
        std::cout << ir::print(*k.ir) << "\n";
      else if (llvm && k.ir)
        std::cout << llvm_backend::ptx(*k.ir, o.arch) << "\n";
      else
        std::cout << k.source << "\n";
    } catch (const std::exception& e) {
      std::cerr << "fp8c emit: " << p.kernel.name() << ": " << e.what() << "\n";
      return 1;
    }
  }
  if (!found) {
    std::cerr << "fp8c emit: no kernel named '" << o.kernel << "'; the spec's kernels are:\n";
    for (const auto& p : kernels->kernels) std::cerr << "  " << p.kernel.name() << "\n";
    return 1;
  }
  report_unsupported(*kernels);
  return 0;
}

const char* outcome(runtime::CacheOutcome c) {
  switch (c) {
    case runtime::CacheOutcome::hit:
      return "hit";
    case runtime::CacheOutcome::compiled:
      return "miss";
    case runtime::CacheOutcome::rebuilt:
      return "rebuilt";
  }
  return "?";
}

int run_compile(const Args& args) {
  KernelOptions o;
  if (auto error = parse(args, o, true); !error.empty()) return usage_error("compile", error);
  const auto kernels = lowered_kernels(o, "compile");
  if (!kernels) return 1;
  std::vector<KernelSource> sources;
  for (const auto& p : kernels->kernels) sources.push_back(emit_cuda(p.kernel));
  const runtime::Jit jit(
      o.arch,
      runtime::CubinCache(o.cache_dir.empty() ? runtime::CubinCache::default_directory()
                                              : o.cache_dir),
      *o.backend);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<runtime::CompiledKernel> compiled;
  try {
    compiled = jit.compile_all(sources, o.threads);
  } catch (const std::exception& e) {
    std::cerr << "fp8c compile: " << e.what() << "\n";
    return 1;
  }
  const double wall =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%-44s %10s %10s %6s %7s %7s  %s\n", "kernel", "ms", "cubin B", "regs", "spills",
              "cache", "compiler");
  int spills = 0;
  int unknown = 0;
  for (const auto& c : compiled) {
    // -1: ptxas did not report spills (NVRTC's own cache) and the kernel has a stack frame.
    const bool known = c.spill_stores >= 0 && c.spill_loads >= 0;
    const std::string spilled = known ? std::to_string(c.spill_stores + c.spill_loads) : "?";
    std::printf("%-44s %10.1f %10zu %6d %7s %7s  %s\n", c.name.c_str(), c.milliseconds,
                c.cubin.size(), c.registers, spilled.c_str(), outcome(c.cache), c.compiler.c_str());
    if (known) spills += c.spill_stores + c.spill_loads;
    unknown += known ? 0 : 1;
    if (!c.cache_warning.empty()) std::cerr << "warning: " << c.cache_warning << "\n";
  }
  std::printf("%zu kernels for %s in %.1f ms wall (cache %s)\n", compiled.size(), o.arch.c_str(),
              wall, jit.cache().directory().c_str());
  report_unsupported(*kernels);
  if (spills) std::cerr << "warning: " << spills << " bytes of register spills\n";
  if (unknown)
    std::cerr << "warning: spills of " << unknown
              << " kernels unknown (NVRTC served them from its cache without ptxas's report; "
                 "CUDA_CACHE_DISABLE=1 makes ptxas run)\n";
  return 0;
}

}  // namespace

const std::vector<Command>& kernel_commands() {
  static const std::vector<Command> commands = {
      {"emit", "print the generated CUDA C++ of a spec's kernels",
       "usage: fp8c emit FILE [--layer L] [--kernel K] [--ir] [--backend B] [--arch ARCH]\n"
       "                     [--ranks N] [--tokens M]\n"
       "\n"
       "Plans and lowers FILE (as `fp8c plan --lowered` does) and prints the\n"
       "source of every kernel the lowered plan launches (the ones a Session\n"
       "compiles), each headed by the steps that use it: CUDA C++ under\n"
       "backend nvrtc, PTX for ARCH (default sm_90a) under backend llvm. Kernels\n"
       "needed by several steps are printed once. Kinds not built as kernel IR\n"
       "yet print their CUDA C++ under either backend, saying so.\n"
       "\n"
       "  --layer L    only the kernels of layer L\n"
       "  --kernel K   only kernel K (names as `fp8c compile` lists them)\n"
       "  --ir         the kernel IR instead (codegen/ir)\n"
       "  --backend B  nvrtc or llvm (default: the spec's `backend =`, else nvrtc)\n"
       "  --ranks N, --tokens M   as for `fp8c plan`\n"
       "\n"
       "What the GPU executor cannot run yet is listed on stderr.\n"
       "Exit status: 0 success, 1 invalid spec, unknown kernel or no LLVM backend,\n"
       "2 usage error.\n",
       run_emit},
      {"compile", "compile a spec's kernels with NVRTC or LLVM (no GPU needed)",
       "usage: fp8c compile FILE [--arch ARCH] [--backend B] [--layer L] [--threads T]\n"
       "                        [--cache-dir D] [--ranks N] [--tokens M]\n"
       "\n"
       "Compiles every kernel of FILE's lowered plan (the kernels a Session\n"
       "compiles) to a CUBIN for ARCH (default sm_90a), in parallel, through the\n"
       "on-disk cache, and prints per kernel: compile ms (cache read ms on a hit),\n"
       "CUBIN bytes, registers, spilled bytes, whether the cache had it, and the\n"
       "compiler that built it. The cache is FP8C_CACHE_DIR, else\n"
       "$XDG_CACHE_HOME/fp8c, else ~/.cache/fp8c (or --cache-dir).\n"
       "\n"
       "  --backend B  nvrtc (CUDA C++ through NVRTC) or llvm (kernel IR through\n"
       "               LLVM's NVPTX target, PTX through nvJitLink); kinds not\n"
       "               built as IR yet go through NVRTC under either. Default:\n"
       "               the spec's `backend =`, else nvrtc.\n"
       "  --threads T  compile on T threads (default: one per core)\n"
       "\n"
       "Exit status: 0 success, 1 invalid spec, a compiler missing or a compile\n"
       "error, 2 usage error.\n",
       run_compile},
  };
  return commands;
}

}  // namespace fp8c::tools
