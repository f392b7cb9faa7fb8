// The generated FP8 GEMM (codegen/kernels/fp8_gemm.hpp) as a GemmRunner:
// compiles each configuration the heuristic picks once (NVRTC, through the
// JIT's cubin cache), loads it, and launches it with TMA descriptors made for
// the call's operands.
#pragma once

#include <memory>
#include <string>

#include "codegen/kernels/fp8_gemm_heuristic.hpp"
#include "runtime/gemm/gemm.hpp"
#include "runtime/jit.hpp"

namespace fp8c::runtime {

class GeneratedGemmRunner : public GemmRunner {
 public:
  // The configuration run() would launch for `args` (which supports() must
  // accept), and the kernel's host-side record once it has been compiled.
  virtual Fp8GemmChoice choice(const GemmArgs& args) const = 0;
  virtual const CompiledKernel& compiled(const Fp8GemmKernel& kernel) = 0;
  // CTAs run() launches for `args`: the choice's, or fewer where not that
  // many clusters fit on the GPU at once (compiles the kernel to ask).
  virtual int launch_ctas(const GemmArgs& args) = 0;
  // Every configuration compiled and loaded so far (prepare() or run()),
  // by name, then the dbias reductions beside them, by output type.
  virtual std::vector<CompiledKernel> loaded_kernels() const = 0;
};

// Needs the device's context current on the calling thread, at creation and
// for run(); `jit` must outlive the runner and target sm_90a (anything else
// makes every supports() false, saying so). What it supports, today:
//  - A and B e4m3 or e5m2 (any pairing), K-innermost, K a multiple of 16,
//    rows 16-byte aligned;
//  - both per-tensor (fast or promoted accumulation), or both block-scaled
//    with 1x128 and/or 128x128 fp32 scales (either 1x128 order);
//  - D bf16, fp16, fp32 (pairs of elements aligned), or e4m3/e5m2 with its
//    d_scale;
//  - every epilogue GemmArgs describes, fused: bias (bf16, fp16, fp32), any
//    activation with its pre-activation as aux, accumulation into a
//    high-precision D, and the amax (written: zeroed on `stream` first);
//    the backward's dact from a saved pre-activation, dbias (a second
//    kernel on `stream` adds the GEMM's partial sums in order:
//    deterministic), and an FP8 D's transposed copy.
// `clusters` (or FP8C_GEMM_CLUSTERS=1) lets the heuristic pick clusters of two
// CTAs sharing B (fp8_gemm_heuristic.hpp: no faster so far).
// FP8C_GEMM_BLOCK_N=N and FP8C_GEMM_BLOCK_M=M replace the heuristic's tile
// width and height, for tuning sweeps (a tile the form cannot take makes
// supports() false, saying why). FP8C_GEMM_DEVICE_SOURCE=FILE compiles the
// device code in FILE instead of the built-in fp8_gemm_sm90.cuh, so that
// variants of the kernel can be timed without a rebuild.
std::unique_ptr<GeneratedGemmRunner> make_generated_gemm_runner(const Jit& jit,
                                                                bool clusters = false);

// What the runner decides, without a GPU (for the lowering's tests and
// tools): the configuration for `args` on an sm_90a GPU of `sms` SMs, and
// why the generated GEMM cannot run `args` there ("" when it can).
// `block_n` and `block_m` (0: the heuristic's) fix the tile's width and height.
Fp8GemmChoice generated_gemm_choice(const GemmArgs& args, bool clusters, int sms, int block_n = 0,
                                    int block_m = 0);
std::string generated_gemm_problem(const GemmArgs& args, bool clusters, int sms, int block_n = 0,
                                   int block_m = 0);

}  // namespace fp8c::runtime
