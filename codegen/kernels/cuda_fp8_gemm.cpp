// CUDA source of one Fp8GemmKernel configuration: the shared parameter
// struct, the configuration's constants, its wgmma instruction, then the
// device code of fp8_gemm_sm90.cuh, all as NVRTC receives them.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "codegen/kernels/cuda_activation.hpp"
#include "codegen/kernels/device/device_sources.hpp"
#include "codegen/kernels/fp8_gemm.hpp"

namespace fp8c {
namespace {

constexpr std::size_t kBarrierBytes = 256;  // 2 x stages mbarriers, 8 bytes each, rounded up

std::string ptx_type(ElemType t) {
  return t == ElemType::e4m3 ? "e4m3" : "e5m2";
}

// The device code's element type codes (fp8_gemm_sm90.cuh).
int type_code(ElemType t) {
  switch (t) {
    case ElemType::bf16:
      return 0;
    case ElemType::fp16:
      return 1;
    case ElemType::fp32:
      return 2;
    case ElemType::e4m3:
      return 3;
    case ElemType::e5m2:
      return 4;
    default:
      return -1;
  }
}

// wgmma m64 x n x k32 with fp32 accumulators: n / 2 registers a thread, one
// asm operand each, which is why this is written per tile width rather than
// in the header.
std::string wgmma_wrapper(int n, ElemType a, ElemType b) {
  const int regs = n / 2;
  std::ostringstream s;
  s << "namespace fp8c_gemm {\n"
    << "__device__ __forceinline__ void wgmma_m64k32(float (&d)[" << regs
    << "], unsigned long long a, unsigned long long b, int accumulate) {\n"
    << "  asm volatile(\n"
    << "      \"{\\n .reg .pred p;\\n setp.ne.b32 p, %" << regs + 2 << ", 0;\\n\"\n"
    << "      \" wgmma.mma_async.sync.aligned.m64n" << n << "k32.f32." << ptx_type(a) << "."
    << ptx_type(b) << " {";
  for (int i = 0; i < regs; ++i) s << (i ? ", " : "") << "%" << i;
  s << "}, %" << regs << ", %" << regs + 1 << ", p, 1, 1;\\n}\"\n      : ";
  for (int i = 0; i < regs; ++i) s << (i ? ", " : "") << "\"+f\"(d[" << i << "])";
  s << "\n      : \"l\"(a), \"l\"(b), \"r\"(accumulate));\n}\n}  // namespace fp8c_gemm\n";
  return s.str();
}

// The device code: the header built in, or for tuning experiments the file
// FP8C_GEMM_DEVICE_SOURCE names (generated_gemm.hpp). The JIT's cache key
// is the whole source, so a variant never finds another's cubin.
std::string device_code() {
  if (const char* path = std::getenv("FP8C_GEMM_DEVICE_SOURCE")) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) throw std::runtime_error(std::string("FP8C_GEMM_DEVICE_SOURCE: cannot read ") + path);
    return text.str();
  }
  return std::string(device_source::fp8_gemm_sm90_cuh);
}

}  // namespace

std::size_t Fp8GemmKernel::shared_bytes() const {
  // Per stage: the A and B tiles (128 bytes of K a row), and when
  // block-scaled the tile's row and column scales (fp8_gemm_sm90.cuh):
  // a float each, or with MXFP8 four floats (one per 32 K) and the word of
  // four E8M0 codes they are decoded from.
  const std::size_t rows = static_cast<std::size_t>(block_m + block_n);
  const std::size_t scale_bytes = mx ? rows * (16 + 4) : block_scaled() ? rows * 4 : 0;
  return static_cast<std::size_t>(stages) * (128 * rows + scale_bytes) + kBarrierBytes + 1024;
}

int deepest_ring(Fp8GemmKernel kernel, int most) {
  kernel.stages = most;
  while (kernel.stages > 2 && kernel.shared_bytes() > kSm90SharedBytes) --kernel.stages;
  return kernel.stages;
}

std::string Fp8GemmKernel::name() const {
  std::ostringstream s;
  s << "fp8_gemm_" << ptx_type(a) << "_" << ptx_type(b) << "_" << to_string(d) << "_";
  if (mx) {
    s << (a_scales_k_major ? "mx_km" : "mx");
  } else if (block_scaled()) {
    s << "b" << a_scale_rows << "x" << b_scale_rows;
    if (a_scales_k_major || b_scales_k_major)
      s << "_km" << (a_scales_k_major ? "a" : "") << (b_scales_k_major ? "b" : "");
  } else
    s << (fast_accumulate ? "pt_fast" : "pt");
  s << "_" << block_m << "x" << block_n << "_s" << stages;
  if (cluster_m > 1) s << "_c" << cluster_m;
  if (bias) s << "_bias_" << to_string(bias_type);
  if (activation != Activation::none) s << "_" << to_string(activation);
  if (aux) s << (dact != Activation::none ? "_pre_" : "_aux_") << to_string(aux_type);
  if (dact != Activation::none) s << "_d" << to_string(dact);
  if (dbias) s << "_dbias";
  if (transposed) s << "_dt";
  if (accumulate) s << "_acc";
  if (amax) s << "_amax";
  return s.str();
}

std::string fp8_gemm_problem(const Fp8GemmKernel& k) {
  if (!is_fp8(k.a) || !is_fp8(k.b)) return "operands must be e4m3 or e5m2";
  if (!is_high_precision(k.d) && !is_fp8(k.d))
    return "D must be bf16, fp16, fp32, e4m3 or e5m2, not " + std::string(to_string(k.d));
  if (k.bias && !is_high_precision(k.bias_type))
    return "the bias must be bf16, fp16 or fp32, not " + std::string(to_string(k.bias_type));
  if (k.aux && !is_high_precision(k.aux_type))
    return "aux must be bf16, fp16 or fp32, not " + std::string(to_string(k.aux_type));
  if (k.dact != Activation::none) {
    if (!k.aux) return "dact reads the saved pre-activation: it needs aux";
    if (k.activation != Activation::none || k.bias || k.accumulate)
      return "dact is the backward's epilogue: no activation, bias or accumulation beside it";
  } else if (k.aux && k.activation == Activation::none) {
    return "aux keeps the pre-activation: it needs an activation";
  }
  if (k.transposed && !is_fp8(k.d)) return "the transposed copy of D is FP8 only";
  if (k.accumulate && is_fp8(k.d)) return "accumulation reads D back: D must be high precision";
  const auto scale_ok = [](int r) { return r == 0 || r == 1 || r == 128; };
  if (!scale_ok(k.a_scale_rows) || !scale_ok(k.b_scale_rows))
    return "scale rows must be 0 (per tensor), 1 (1x128) or 128 (128x128)";
  if ((k.a_scale_rows == 0) != (k.b_scale_rows == 0))
    return "operands must both be per-tensor or both block-scaled";
  if ((k.a_scales_k_major && k.a_scale_rows != 1) || (k.b_scales_k_major && k.b_scale_rows != 1))
    return "only 1x128 and MXFP8 scales can be read K-block-major";
  if (k.mx && (k.a_scale_rows != 1 || k.b_scale_rows != 1))
    return "MXFP8 scales are 1x32 on both operands (scale rows 1)";
  if (k.mx && k.a_scales_k_major != k.b_scales_k_major)
    return "MXFP8 codes must be in one order on both operands (row-major or K-block-major)";
  if (k.block_scaled() && k.fast_accumulate)
    return "block scaling promotes every 128 K; fast accumulation is per-tensor only";
  if (k.block_m != 64 && k.block_m != 128 && k.block_m != 256)
    return "block_m must be 64, 128 or 256";
  // A 256-row tile keeps two 64-row waves of accumulators per math thread
  // (and one partial set when promoting): at most 128 wide, and no room for
  // a 1x128 B's per-column scales (NVRTC spills there).
  if (k.block_m == 256 && (k.block_n > 128 || k.b_scale_rows == 1 || k.mx))
    return "256-row tiles need block_n at most 128 and a B that is neither 1x128-scaled nor "
           "MXFP8";
  if (k.block_n < 16 || k.block_n > 256 || k.block_n % 16 != 0)
    return "block_n must be a multiple of 16 in [16, 256]";
  // Accumulators per math thread: block_n / 2, twice when promoting, out of
  // the 232 registers setmaxnreg gives them (224 block-scaled): the widest
  // that compile without spills (Fp8GemmCompile tests).
  // A 1x128 B keeps a scale per column of the thread's (block_n / 4
  // registers); 128x128 B tiles one or two.
  // MXFP8 promotes every 32 K with a fresh partial set: block_n / 2
  // accumulators twice over, in the 168 registers a thread the math path is
  // compiled for. At 128 wide ptxas spills a few with some epilogues and
  // clusters, at 96 with any (Fp8GemmCompile tests).
  if (k.mx && (k.block_n > 112 || k.block_n == 96))
    return "MXFP8 tiles must be at most 112 wide, and not 96: those spill registers";
  if (k.block_scaled() && k.block_n > (k.b_scale_rows == 128 ? 160 : 144))
    return "block_n above " + std::string(k.b_scale_rows == 128 ? "160" : "144") +
           " leaves too few registers for block-scaled promotion";
  if (k.promotes() && k.block_n > 160)
    return "block_n above 160 leaves too few registers for promotion";
  if (k.stages < 2 || k.stages > 16) return "stages must be 2 to 16";
  if (k.cluster_m != 1 && k.cluster_m != 2) return "cluster_m must be 1 or 2";
  // Each CTA of a cluster loads block_n / cluster_m rows of B, at a
  // 1024-byte (8-row) boundary of the swizzle.
  if (k.block_n % (8 * k.cluster_m) != 0) return "block_n / cluster_m must be a multiple of 8";
  if (k.shared_bytes() > kSm90SharedBytes)
    return "needs " + std::to_string(k.shared_bytes()) + " bytes of shared memory, more than " +
           std::to_string(kSm90SharedBytes);
  return {};
}

KernelSource emit_cuda(const Fp8GemmKernel& k) {
  if (const std::string why = fp8_gemm_problem(k); !why.empty())
    throw std::invalid_argument("fp8 gemm " + k.name() + ": " + why);
  std::ostringstream s;
  s << device_source::fp8_gemm_params_h << "\n"
    << "namespace fp8c_gemm {\n"
    << "constexpr int kBlockM = " << k.block_m << ";\n"
    << "constexpr int kBlockN = " << k.block_n << ";\n"
    << "constexpr int kStages = " << k.stages << ";\n"
    << "constexpr int kAScaleRows = " << k.a_scale_rows << ";\n"
    << "constexpr int kBScaleRows = " << k.b_scale_rows << ";\n"
    << "constexpr bool kAScalesKMajor = " << (k.a_scales_k_major ? "true" : "false") << ";\n"
    << "constexpr bool kBScalesKMajor = " << (k.b_scales_k_major ? "true" : "false") << ";\n"
    << "constexpr bool kMx = " << (k.mx ? "true" : "false") << ";\n"
    << "constexpr bool kPromote = " << (k.promotes() ? "true" : "false") << ";\n"
    << "constexpr int kOut = " << type_code(k.d) << ";  // 0 bf16, 1 fp16, 2 fp32, 3 e4m3, 4 e5m2\n"
    << "constexpr int kClusterM = " << k.cluster_m << ";\n"
    << "constexpr int kBias = " << (k.bias ? type_code(k.bias_type) : -1) << ";\n"
    << "constexpr int kAux = " << (k.aux ? type_code(k.aux_type) : -1) << ";\n"
    << "constexpr bool kAccumulate = " << (k.accumulate ? "true" : "false") << ";\n"
    << "constexpr bool kAmax = " << (k.amax ? "true" : "false") << ";\n"
    << "constexpr bool kDact = " << (k.dact != Activation::none ? "true" : "false") << ";\n"
    << "constexpr bool kDbias = " << (k.dbias ? "true" : "false") << ";\n"
    << "constexpr bool kTransposed = " << (k.transposed ? "true" : "false") << ";\n"
    << "}  // namespace fp8c_gemm\n"
    // act and dact: never both GELU (fp8_gemm_problem), which would define tanh_fast twice.
    << cuda_activation_function(k.activation) << cuda_activation_grad_function(k.dact)
    << wgmma_wrapper(k.block_n, k.a, k.b) << "#define FP8C_GEMM_ENTRY " << k.name() << "\n"
    << device_code() << "\n#undef FP8C_GEMM_ENTRY\n";
  return {k.name(), k.name(), s.str(), {}};
}

}  // namespace fp8c
