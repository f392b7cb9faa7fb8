// How long each kernel built as IR takes to compile cold under each backend
// (a benchmark, not a test; no GPU needed): NVRTC from the printed CUDA C++,
// and LLVM from the IR (emit + O3 + NVPTX) then nvJitLink from the PTX,
// each step timed on its own. No cubin cache; the first compile of each
// backend (which also loads the compiler: NVRTC's library, the LLVM module)
// is reported apart as `first_ms` and left out of the median of the
// `--repeats` compiles after it. Then every kernel of each --spec file, cold,
// through the JIT under each backend, as `fp8c compile` does (wall time).
// CUDA_CACHE_DISABLE=1 is set, so no compiler's own cache serves a repeat.
// Run it on the machine class that matters (CI's 2 cores), nothing else running.
//
//   build/bench/kernel_compile_bench [--json FILE] [--repeats N] [--threads T] [--spec FILE]...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "codegen/backends/llvm/llvm_backend.hpp"
#include "codegen/lower/lowered.hpp"
#include "codegen/plan/planner.hpp"
#include "fp8c/dsl.hpp"
#include "runtime/jit.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/ptx_compiler.hpp"

using namespace fp8c;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct KernelTimes {
  std::string name;
  double nvrtc_ms = 0, nvrtc_first_ms = 0;
  double llvm_ptx_ms = 0, ptxas_ms = 0, llvm_total_ms = 0, llvm_first_ms = 0;
};

struct SpecTimes {
  std::string spec;
  std::size_t kernels = 0, ir_kernels = 0;
  double nvrtc_wall_ms = 0, llvm_wall_ms = 0;
};

// Every kernel of `file`'s plan, compiled cold by one Jit on `threads` threads.
double cold_wall_ms(const std::vector<KernelSource>& kernels, KernelBackend backend,
                    unsigned threads) {
  const auto dir = std::filesystem::temp_directory_path() / "fp8c-kernel-compile-bench";
  std::filesystem::remove_all(dir);
  const runtime::Jit jit("sm_90a", runtime::CubinCache(dir.string()), backend);
  const auto t0 = Clock::now();
  (void)jit.compile_all(kernels, threads);
  const double ms = ms_since(t0);
  std::filesystem::remove_all(dir);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  // No compiler's own cache may serve a repeat (NVRTC's ptxas step has one).
  setenv("CUDA_CACHE_DISABLE", "1", 1);
  std::string json;
  int repeats = 5;
  unsigned threads = 2;
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc)
      json = argv[++i];
    else if (a == "--repeats" && i + 1 < argc)
      repeats = std::max(1, std::atoi(argv[++i]));
    else if (a == "--threads" && i + 1 < argc)
      threads = static_cast<unsigned>(std::max(1, std::atoi(argv[++i])));
    else if (a == "--spec" && i + 1 < argc)
      specs.push_back(argv[++i]);
    else {
      std::cerr << "usage: kernel_compile_bench [--json FILE] [--repeats N] [--threads T] "
                   "[--spec FILE]...\n";
      return 2;
    }
  }
  try {
    if (!llvm_backend::available()) {
      std::cerr << "kernel_compile_bench: " << llvm_backend::unavailable_reason() << "\n";
      return 1;
    }
    // The IR kernels: the transposes and permutes, and those of the specs' plans.
    std::vector<KernelSource> ir = {emit_cuda(TransposeKernel{1}), emit_cuda(TransposeKernel{4}),
                                    emit_cuda(PermuteKernel{1}), emit_cuda(PermuteKernel{2}),
                                    emit_cuda(PermuteKernel{4})};
    std::set<std::string> names;
    for (const auto& k : ir) names.insert(k.name);
    std::vector<std::vector<KernelSource>> spec_kernels;
    for (const auto& file : specs) {
      const Spec spec = load_spec(file);
      const LoweredPlan lowered = lower_plan(spec, plan_spec(spec, {}));
      spec_kernels.emplace_back();
      for (const auto& p : lowered.kernels) {
        KernelSource k = emit_cuda(p.kernel);
        if (k.ir && names.insert(k.name).second) ir.push_back(k);
        spec_kernels.back().push_back(std::move(k));
      }
    }

    std::vector<KernelTimes> rows;
    bool first_nvrtc = true, first_llvm = true;
    for (const auto& k : ir) {
      KernelTimes t;
      t.name = k.name;
      std::vector<double> nvrtc, ptx, ptxas, total;
      for (int r = 0; r <= repeats; ++r) {
        auto t0 = Clock::now();
        (void)runtime::compile_to_cubin(k.source, k.name + ".cu", k.entry, "sm_90a", k.options);
        const double n = ms_since(t0);
        t0 = Clock::now();
        const std::string text = llvm_backend::ptx(*k.ir, "sm_90a");
        const double p = ms_since(t0);
        const auto t1 = Clock::now();
        (void)runtime::compile_ptx_to_cubin(text, k.name + ".ptx", k.entry, "sm_90a");
        const double a = ms_since(t1);
        if (r == 0) {
          // The first of all also loads the compilers; reported apart.
          if (first_nvrtc) t.nvrtc_first_ms = n;
          if (first_llvm) t.llvm_first_ms = p + a;
          first_nvrtc = first_llvm = false;
          continue;
        }
        nvrtc.push_back(n);
        ptx.push_back(p);
        ptxas.push_back(a);
        total.push_back(p + a);
      }
      t.nvrtc_ms = median(nvrtc);
      t.llvm_ptx_ms = median(ptx);
      t.ptxas_ms = median(ptxas);
      t.llvm_total_ms = median(total);
      rows.push_back(t);
    }
    std::vector<SpecTimes> spec_rows;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      SpecTimes s;
      s.spec = specs[i];
      s.kernels = spec_kernels[i].size();
      for (const auto& k : spec_kernels[i]) s.ir_kernels += k.ir != nullptr;
      s.nvrtc_wall_ms = cold_wall_ms(spec_kernels[i], KernelBackend::nvrtc, threads);
      s.llvm_wall_ms = cold_wall_ms(spec_kernels[i], KernelBackend::llvm, threads);
      spec_rows.push_back(s);
    }

    std::printf("llvm %s, %s, nvrtc %d.%d; median of %d cold compiles\n",
                llvm_backend::llvm_version().c_str(), runtime::ptx_compiler_version().c_str(),
                runtime::nvrtc().major, runtime::nvrtc().minor, repeats);
    std::printf("%-20s %10s %12s %10s %12s\n", "kernel", "nvrtc_ms", "llvm_ptx_ms", "ptxas_ms",
                "llvm_total");
    for (const auto& t : rows)
      std::printf("%-20s %10.1f %12.1f %10.1f %12.1f\n", t.name.c_str(), t.nvrtc_ms, t.llvm_ptx_ms,
                  t.ptxas_ms, t.llvm_total_ms);
    for (const auto& s : spec_rows)
      std::printf("%s: %zu kernels (%zu as IR), cold on %u threads: nvrtc %.1f ms, llvm %.1f ms\n",
                  s.spec.c_str(), s.kernels, s.ir_kernels, threads, s.nvrtc_wall_ms,
                  s.llvm_wall_ms);
    if (!json.empty()) {
      std::ofstream out(json);
      out << "{\n  \"llvm\": \"" << llvm_backend::llvm_version() << "\",\n  \"ptx_compiler\": \""
          << runtime::ptx_compiler_version() << "\",\n  \"repeats\": " << repeats
          << ",\n  \"cores\": " << std::thread::hardware_concurrency() << ",\n  \"kernels\": [\n";
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& t = rows[i];
        out << "    {\"name\": \"" << t.name << "\", \"nvrtc_ms\": " << t.nvrtc_ms
            << ", \"llvm_ptx_ms\": " << t.llvm_ptx_ms << ", \"ptxas_ms\": " << t.ptxas_ms
            << ", \"llvm_total_ms\": " << t.llvm_total_ms
            << ", \"ratio_llvm_over_nvrtc\": " << t.llvm_total_ms / t.nvrtc_ms
            << ", \"nvrtc_first_ms\": " << t.nvrtc_first_ms
            << ", \"llvm_first_ms\": " << t.llvm_first_ms << "}"
            << (i + 1 < rows.size() ? ",\n" : "\n");
      }
      out << "  ],\n  \"specs\": [\n";
      for (std::size_t i = 0; i < spec_rows.size(); ++i) {
        const auto& s = spec_rows[i];
        out << "    {\"spec\": \"" << s.spec << "\", \"kernels\": " << s.kernels
            << ", \"ir_kernels\": " << s.ir_kernels << ", \"threads\": " << threads
            << ", \"nvrtc_wall_ms\": " << s.nvrtc_wall_ms
            << ", \"llvm_wall_ms\": " << s.llvm_wall_ms << "}"
            << (i + 1 < spec_rows.size() ? ",\n" : "\n");
      }
      out << "  ]\n}\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "kernel_compile_bench: " << e.what() << "\n";
    return 1;
  }
}
