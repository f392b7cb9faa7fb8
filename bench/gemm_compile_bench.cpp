// How long the generated FP8 GEMM takes to JIT (a benchmark, not a test; no
// GPU needed): every configuration the heuristic picks for the GEMM
// benchmark's shapes in every scaling, compiled cold with NVRTC (no cubin cache), one at a
// time, median of 3 compiles each. Run it on the machine class that matters
// (CI's 2 cores) with nothing else running.
//
//   build/bench/gemm_compile_bench [--json FILE] [--sms N]
//   build/bench/gemm_compile_bench --every-tile
//
// --every-tile is a tuning aid instead: every tile each scaling's description
// accepts (64, 128 and 256 rows, 16 to 256 columns, e4m3 x e4m3 -> bf16, as
// many stages as shared memory holds), compiled once each, with registers,
// spills, and whether ptxas serialized the wgmmas. With
// FP8C_GEMM_DEVICE_SOURCE=FILE it shows what a variant of the device code
// does to them before any GPU time is spent.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "codegen/kernels/fp8_gemm_heuristic.hpp"
#include "runtime/nvrtc.hpp"

using namespace fp8c;

namespace {

int report_every_tile(const std::vector<Fp8GemmKernel>& forms) {
  try {
    for (Fp8GemmKernel k : forms)
      for (int rows : {64, 128, 256})
        for (int columns = 16; columns <= 256; columns += 16) {
          k.block_m = rows;
          k.block_n = columns;
          k.stages = deepest_ring(k);
          if (!fp8_gemm_problem(k).empty()) continue;
          const KernelSource src = emit_cuda(k);
          const auto o =
              runtime::compile_to_cubin(src.source, src.name, src.entry, "sm_90a", src.options);
          // ptxas says only in its log when it serializes the wgmmas.
          const bool serialized = o.log.find("wgmma") != std::string::npos;
          std::printf("%-48s %3d registers, spills %d stores %d loads%s\n", src.name.c_str(),
                      o.registers, o.spill_stores, o.spill_loads,
                      serialized ? ", wgmma serialized" : "");
        }
  } catch (const std::exception& e) {
    std::cerr << "gemm_compile_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  int sms = 132;
  bool every_tile = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--sms" && i + 1 < argc) {
      sms = std::atoi(argv[++i]);
    } else if (a == "--every-tile") {
      every_tile = true;
    } else {
      std::cerr << "usage: gemm_compile_bench [--json FILE] [--sms N] | --every-tile\n";
      return 2;
    }
  }
  const std::int64_t shapes[][3] = {{8192, 8192, 8192},   {16384, 8192, 8192}, {16384, 28672, 8192},
                                    {16384, 8192, 28672}, {4096, 4096, 4096},  {2048, 8192, 8192},
                                    {4096, 7168, 16384}};
  std::vector<Fp8GemmKernel> kernels;
  std::set<std::string> seen;
  // Every scaling the executor runs: per-tensor fast and promoted, 1x128 x
  // 128x128 (fprop, dgrad), 1x128 x 1x128 (wgrad), MXFP8 with its codes
  // row-major and K-block-major (what the executor's layers run).
  std::vector<Fp8GemmKernel> forms(6);
  forms[0].fast_accumulate = true;
  forms[2].a_scale_rows = 1;
  forms[2].b_scale_rows = 128;
  forms[3].a_scale_rows = forms[3].b_scale_rows = 1;
  forms[4].a_scale_rows = forms[4].b_scale_rows = 1;
  forms[4].mx = true;
  forms[5] = forms[4];
  forms[5].a_scales_k_major = forms[5].b_scales_k_major = true;
  if (every_tile) return report_every_tile(forms);
  for (const Fp8GemmKernel& form : forms)
    for (const auto& s : shapes) {
      const Fp8GemmKernel k = choose_fp8_gemm({s[0], s[1], s[2], form}, sms).kernel;
      if (seen.insert(k.name()).second) kernels.push_back(k);
    }
  try {
    std::ofstream out;
    if (!json.empty()) out.open(json);
    if (out) out << "{\n  \"benchmark\": \"gemm_compile\",\n  \"cases\": [\n";
    for (std::size_t i = 0; i < kernels.size(); ++i) {
      const KernelSource src = emit_cuda(kernels[i]);
      std::vector<double> ms;
      int registers = 0;
      for (int r = 0; r < 3; ++r) {
        const auto o =
            runtime::compile_to_cubin(src.source, src.name, src.entry, "sm_90a", src.options);
        ms.push_back(o.milliseconds);
        registers = o.registers;
      }
      std::sort(ms.begin(), ms.end());
      std::printf("%-48s %7.1f ms (min %.1f), %d registers\n", src.name.c_str(), ms[1], ms[0],
                  registers);
      if (out)
        out << "    {\"name\": \"" << src.name << "\", \"median_ms\": " << ms[1]
            << ", \"min_ms\": " << ms[0] << ", \"registers\": " << registers << "}"
            << (i + 1 < kernels.size() ? "," : "") << "\n";
    }
    if (out) out << "  ]\n}\n";
  } catch (const std::exception& e) {
    std::cerr << "gemm_compile_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
