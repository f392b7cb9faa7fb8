// A GEMM as the GPU executor asks for it, independent of what runs it:
// cuBLASLt (cublaslt_gemm.cpp) or fp8c's generated wgmma GEMM
// (generated_gemm.hpp), as each lowered GEMM call's backend says. The
// executor only ever sees GemmRunner.
//
// Row-major throughout, "TN" as Hopper's FP8 tensor cores need it: both
// operands keep K innermost.
//   D[M][N] = act( alpha * (A[M][K] . B[N][K]^T) + bias[N] (+ D when accumulate) )
//   alpha   = a.scale_inv * b.scale_inv for per-tensor FP8 operands, 1 otherwise
//   aux     = the pre-activation (alpha * A.B^T + bias), stored when activation != none
// An FP8 D is written as fp8(D * d_scale) (saturating), and d_amax, when
// set, receives max |D| before that scaling.
// The backward's epilogue (the generated GEMM only; cuBLASLt's runner
// refuses it):
//   D     = act'(aux) * alpha * (A[M][K] . B[N][K]^T)   with dact: aux is read
//   dbias = the column sums of D over M (before an FP8 D's scaling)
//   D^T   = FP8 D transposed, the same bits, when d_t is set
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/lower/lowered.hpp"
#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"
#include "runtime/cuda_driver.hpp"

namespace fp8c::runtime {

// Where a block_1x128 scale tensor keeps its blocks, for an operand of
// `rows` rows with K innermost (nb = ceil(k / 128)):
//   row_major      scale_inv[r * nb + kb]: what the quantize kernels write
//                  by default (codegen/kernels/block_quantize.hpp)
//   k_block_major  scale_inv[kb * rows + r]: what cuBLASLt's 1x128 mode
//                  (VEC128_32F) reads (runtime/gemm/cublaslt_requirements.hpp),
//                  and what BlockQuantizeKernel::k_block_major writes
// block_128x128 has one order ([ceil(rows/128)][nb]) and ignores this.
// mx_1x32's E8M0 codes (bytes), n32 = ceil(k / 32):
//   row_major      codes[r * n32 + j]: what the quantize kernels write
//   k_block_major  codes[j * rows + r]: the generated GEMM reads these too
//                  (slower than row-major there: docs/gemm.md)
enum class BlockScaleOrder { row_major, k_block_major };

struct GemmOperand {
  CUdeviceptr data = 0;
  ElemType type = ElemType::bf16;  // e4m3, e5m2, bf16, fp16 or fp32
  std::int64_t rows = 0;           // M for a, N for b
  std::int64_t k = 0;
  std::int64_t ld = 0;  // elements from one row to the next (>= k)
  // none: high precision; per_tensor: scale_inv points at one float;
  // block_1x128 / block_128x128 / mx_1x32: scale_inv points at the block
  // scale tensor the quantize kernels write (codegen/kernels/block_quantize.hpp).
  Scaling scaling = Scaling::none;
  CUdeviceptr scale_inv = 0;
  BlockScaleOrder scale_order = BlockScaleOrder::row_major;  // block_1x128 and mx_1x32
  // block_128x128: floats from one row of 128x128 blocks to the next;
  // 0: packed, ceil(k / 128). cuBLASLt reads rows padded to a multiple of 4
  // blocks (cublaslt_requirements.hpp). mx_1x32: E8M0 codes (bytes) from
  // one row to the next; 0: packed, ceil(k / 32) (a K range of a wider
  // operand keeps the whole operand's row length); K-block-major, from one
  // 32-K block to the next, 0: packed, rows.
  std::int64_t scale_stride = 0;
  // High precision only: stored [k][rows] (K outermost, ld >= rows), as a
  // recipe-none layer's wgrad and dgrad read their row-major inputs.
  bool k_outer = false;
};

struct GemmArgs {
  GemmOperand a;  // [M][K]
  GemmOperand b;  // [N][K]
  CUdeviceptr d = 0;
  ElemType d_type = ElemType::bf16;  // bf16, fp16, fp32, e4m3 or e5m2
  std::int64_t ldd = 0;
  bool accumulate = false;  // D += (fp32 D only)
  CUdeviceptr bias = 0;     // [N] in bias_type; 0 for none
  ElemType bias_type = ElemType::bf16;
  Activation activation = Activation::none;
  CUdeviceptr aux = 0;  // [M][ld_aux] in aux_type, with activation (0: not kept)
  ElemType aux_type = ElemType::bf16;
  std::int64_t ld_aux = 0;
  CUdeviceptr d_scale = 0;  // FP8 D only: one float
  CUdeviceptr d_amax = 0;   // optional: one float, max |D| (pre-scale)
  // Per-tensor FP8 only: accumulate inside the tensor cores without periodic
  // promotion to fp32 (faster, less accurate; what fprop usually takes).
  bool fast_accumulate = false;
  // dact != none: aux (aux_type, ld_aux) is the saved pre-activation, read
  // (read-only: it must not overlap D, D^T or dbias_workspace); no
  // activation, bias or accumulation with it.
  Activation dact = Activation::none;
  // dbias [N] in dbias_type (bf16, fp16, fp32), written; needs
  // dbias_workspace, dbias_workspace_bytes(M, N) of device memory the call
  // overwrites (the partial sums, added in order by a second kernel).
  CUdeviceptr dbias = 0;
  ElemType dbias_type = ElemType::fp32;
  CUdeviceptr dbias_workspace = 0;
  // FP8 D only: D^T [N][ld_dt] (elements, >= M) written too.
  CUdeviceptr d_t = 0;
  std::int64_t ld_dt = 0;
};

// Device bytes GemmArgs::dbias_workspace needs for an M x N D: one float per
// column and 16 rows.
inline std::size_t dbias_workspace_bytes(std::int64_t m, std::int64_t n) {
  return static_cast<std::size_t>((m + 15) / 16) * static_cast<std::size_t>(n) * 4;
}

class GemmRunner {
 public:
  virtual ~GemmRunner() = default;
  virtual std::string_view name() const = 0;
  // Whether this runner can do `args` as asked (types, scaling, epilogue,
  // alignment). When not, `why` (if given) says what it lacks, so the
  // executor can fall back or report it.
  virtual bool supports(const GemmArgs& args, std::string* why = nullptr) const = 0;
  // Enqueues the GEMM on `stream`. Throws std::runtime_error naming the
  // failing call; throws std::invalid_argument for args supports() refuses.
  virtual void run(const GemmArgs& args, CUstream stream) = 0;
  // Readies what run(args) will need (a runner that compiles kernels
  // compiles and loads its configuration now), so that the first step does
  // not stall on it. Nothing is enqueued; the pointers in `args` are not
  // read. Default: nothing to do.
  virtual void prepare(const GemmArgs& args) { (void)args; }
};

// cuBLASLt, loaded with dlopen (libcublasLt.so.13, then .12). Throws
// Unavailable (runtime/dynamic_library.hpp) naming the library when it
// cannot be loaded. Needs the device's context current on the calling
// thread, at creation and for supports() and run() (supports() may ask
// cuBLASLt's heuristic); owns up to four 32 MiB workspaces on that device,
// one per stream running GEMMs at the same time. Destroy it only once its
// GEMMs have finished.
std::unique_ptr<GemmRunner> make_cublaslt_runner();
// The same with the library names to try instead of the default ones
// (runtime/gemm/cublaslt_library.hpp: default_cublaslt_sonames()).
std::unique_ptr<GemmRunner> make_cublaslt_runner(const std::vector<std::string>& sonames);

// What the default cuBLASLt on the current context's GPU lets the lowering
// use: its block-scaled GEMM needs version 12.9 or newer and sm_90; and
// whether the GPU can run the generated GEMM (sm_90).
// FP8C_BLOCK_SCALED_GEMM=0 turns it off (block-scaled operands dequantized,
// as before it was used: for comparison, or around a library that
// misbehaves). Throws Unavailable as make_cublaslt_runner() does.
LowerOptions cublaslt_lower_options();

}  // namespace fp8c::runtime
