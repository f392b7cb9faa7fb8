#include "runtime/gemm/cublaslt_requirements.hpp"

#include <initializer_list>

namespace fp8c::runtime {
namespace {

using Problem = std::optional<std::string>;

bool is_block(Scaling s) {
  return s == Scaling::block_1x128 || s == Scaling::block_128x128;
}
bool one_of(ElemType t, std::initializer_list<ElemType> allowed) {
  for (ElemType a : allowed)
    if (t == a) return true;
  return false;
}
std::string name(ElemType t) {
  return std::string(to_string(t));
}
std::string name(Scaling s) {
  return std::string(to_string(s));
}
std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}
std::string sm_name(int sm) {
  return "sm_" + std::to_string(sm);
}

Problem shape_problem(const GemmArgs& g) {
  if (g.a.rows <= 0 || g.b.rows <= 0 || g.a.k <= 0)
    return "M, N and K must be positive (M = " + std::to_string(g.a.rows) +
           ", N = " + std::to_string(g.b.rows) + ", K = " + std::to_string(g.a.k) + ")";
  if (g.a.k != g.b.k)
    return "A has K = " + std::to_string(g.a.k) + " but B has K = " + std::to_string(g.b.k);
  // An operand stored K-outer ([k][rows]) needs ld >= rows instead of K.
  for (const GemmOperand* o : {&g.a, &g.b})
    if (o->k_outer && o->ld < o->rows)
      return "a K-outer operand's ld is smaller than its rows (ld = " + std::to_string(o->ld) +
             ", rows = " + std::to_string(o->rows) + ")";
  if ((!g.a.k_outer && g.a.ld < g.a.k) || (!g.b.k_outer && g.b.ld < g.b.k))
    return "an operand's ld is smaller than K (lda = " + std::to_string(g.a.ld) +
           ", ldb = " + std::to_string(g.b.ld) + ", K = " + std::to_string(g.a.k) + ")";
  if ((g.a.k_outer && is_fp8(g.a.type)) || (g.b.k_outer && is_fp8(g.b.type)))
    return std::string(
        "an FP8 operand must keep K innermost (Hopper's FP8 GEMMs are TN); k_outer is for "
        "high-precision operands");
  if (g.ldd < g.b.rows)
    return "ldd = " + std::to_string(g.ldd) + " is smaller than N = " + std::to_string(g.b.rows);
  if (!g.a.data || !g.b.data || !g.d) return "A, B and D need device pointers";
  return std::nullopt;
}

Problem operand_type_problem(const GemmArgs& g, int sm) {
  const ElemType a = g.a.type, b = g.b.type;
  if (a == ElemType::e8m0 || b == ElemType::e8m0 || g.d_type == ElemType::e8m0)
    return std::string("e8m0 is a scale type, not a GEMM operand or output");
  if (is_fp8(a) != is_fp8(b))
    return "A is " + name(a) + " and B is " + name(b) +
           ": cuBLASLt multiplies two FP8 operands or two high-precision ones, not one of each";
  if (is_fp8(a)) {
    if (sm < 89) return "FP8 GEMMs need sm_89 or newer; this GPU is " + sm_name(sm);
    if (a == ElemType::e5m2 && b == ElemType::e5m2)
      return std::string("cuBLASLt has no e5m2 x e5m2 FP8 GEMM (one operand must be e4m3)");
    return std::nullopt;
  }
  if (a != b)
    return "high-precision operands must have one type (A is " + name(a) + ", B is " + name(b) +
           ")";
  return std::nullopt;
}

Problem output_type_problem(const GemmArgs& g) {
  const ElemType a = g.a.type, b = g.b.type, d = g.d_type;
  if (is_fp8(a)) {
    const bool has_e5m2 = a == ElemType::e5m2 || b == ElemType::e5m2;
    if (d == ElemType::e5m2 && !has_e5m2)
      return std::string("cuBLASLt writes an e5m2 D only when an operand is e5m2 (both are e4m3)");
  } else if (!(d == a || d == ElemType::fp32)) {
    return "a " + name(a) + " GEMM writes a " + name(a) + " or fp32 D, not " + name(d);
  }
  if (g.d_scale && !is_fp8(d)) return "d_scale applies to an FP8 D only (D is " + name(d) + ")";
  if (g.d_amax && !is_fp8(d))
    return "d_amax is produced only with an FP8 D here (D is " + name(d) +
           "); fp8c has not checked cuBLASLt's amax for other outputs";
  if (g.accumulate && d != ElemType::fp32)
    return "accumulate (D += A.B^T) needs an fp32 D; D is " + name(d);
  if (g.accumulate && g.activation != Activation::none)
    return std::string("accumulate with an activation: the pre-activation would include the old D");
  if (g.fast_accumulate && !is_fp8(a))
    return std::string("fast_accumulate applies to FP8 operands only");
  return std::nullopt;
}

// One operand's scaling, apart from block scaling's cross-operand rules.
Problem operand_scaling_problem(const GemmOperand& op, const char* which, int sm) {
  if (!is_fp8(op.type)) {
    if (op.scaling != Scaling::none)
      return std::string(which) + " is " + name(op.type) + " but has " + name(op.scaling) +
             " scaling; high-precision operands are unscaled";
    return std::nullopt;
  }
  switch (op.scaling) {
    case Scaling::none:
      return std::nullopt;  // scale 1
    case Scaling::per_tensor:
      if (!op.scale_inv) return std::string(which) + " is per_tensor but has no scale_inv";
      return std::nullopt;
    case Scaling::block_1x128:
    case Scaling::block_128x128:
      if (!op.scale_inv) return std::string(which) + " is block-scaled but has no scale_inv";
      return std::nullopt;
    case Scaling::mx_1x32:
      if (sm < 100)
        return "MXFP8 (mx_1x32, E8M0 scales) runs in cuBLASLt only on Blackwell (sm_100+); "
               "this GPU is " +
               sm_name(sm);
      return std::string(
          "MXFP8 (mx_1x32): cuBLASLt's VEC32_UE8M0 reads E8M0 scales in its swizzled 128x4-tile "
          "layout, not the plain [rows][ceil(K/32)] fp8c's quantizer writes");
  }
  return std::nullopt;
}

// Whether fp8c's scale tensor for `op` is laid out as cuBLASLt reads it.
Problem block_layout_problem(const GemmOperand& op, const char* which) {
  const std::int64_t nb = ceil_div(op.k, 128);
  if (op.scaling == Scaling::block_1x128) {
    if (nb == 1) return std::nullopt;  // one block per row: both orders agree
    if (op.scale_order == BlockScaleOrder::row_major)
      return std::string(which) +
             ": cuBLASLt's 1x128 mode (VEC128_32F) reads scales K-block-major, "
             "[ceil(K/128)][rows] with rows contiguous; fp8c's quantizer writes them row-major, "
             "[rows][ceil(K/128)] (transpose them and set scale_order = k_block_major)";
    if (op.rows % 4 != 0)
      return std::string(which) + " has " + std::to_string(op.rows) +
             " rows: a K-block-major 1x128 scale tensor is unambiguous for cuBLASLt only when "
             "rows % 4 == 0 (TransformerEngine pads rows to 4, PyTorch does not)";
    return std::nullopt;
  }
  const std::int64_t stride = op.scale_stride ? op.scale_stride : nb;
  if (stride < nb)
    return std::string(which) + ": scale_stride " + std::to_string(stride) + " is less than the " +
           std::to_string(nb) + " K blocks of a row";
  if (op.rows > 128 && stride != (nb + 3) / 4 * 4)
    return std::string(which) +
           ": cuBLASLt reads a 128x128 scale tensor with each row of blocks padded to a "
           "multiple of 4 (ceil(K/128) = " +
           std::to_string(nb) + ", scale_stride " + std::to_string(stride) +
           "); lay it out with scale_stride = " + std::to_string((nb + 3) / 4 * 4);
  return std::nullopt;
}

Problem block_scaling_problem(const GemmArgs& g, std::size_t version, int sm) {
  const bool a_block = is_block(g.a.scaling), b_block = is_block(g.b.scaling);
  if (!a_block && !b_block) return std::nullopt;
  if (a_block != b_block)
    return "A is " + name(g.a.scaling) + " and B is " + name(g.b.scaling) +
           ": cuBLASLt block scaling needs both operands block-scaled";
  if (version < kCublasLtBlockScalingVersion)
    return "block scaling needs cuBLASLt 12.9 or newer (this one reports " +
           std::to_string(version) + ")";
  if (sm != 90)
    return "cuBLASLt's 1x128 / 128x128 block scaling is a Hopper (sm_90) feature; this GPU is " +
           sm_name(sm);
  if (g.a.scaling == Scaling::block_128x128 && g.b.scaling == Scaling::block_128x128)
    return std::string(
        "cuBLASLt has no 128x128 x 128x128 block-scaled GEMM (one side must be 1x128)");
  if (auto p = block_layout_problem(g.a, "A")) return p;
  if (auto p = block_layout_problem(g.b, "B")) return p;
  if (g.fast_accumulate) return std::string("block scaling does not take fast_accumulate");
  if (g.activation != Activation::none)
    return std::string("block-scaled GEMMs take no activation epilogue here (bias only)");
  if (is_fp8(g.d_type)) return std::string("block-scaled GEMMs write a bf16, fp16 or fp32 D here");
  return std::nullopt;
}

Problem bias_problem(const GemmArgs& g) {
  if (!g.bias) return std::nullopt;
  const ElemType d = g.d_type, bias = g.bias_type;
  bool ok = false;
  if (!is_fp8(g.a.type))
    ok = bias == d;
  else if (d == ElemType::bf16 || d == ElemType::fp32)
    ok = bias == ElemType::bf16;
  else if (d == ElemType::fp16)
    ok = bias == ElemType::fp16;
  else
    ok = one_of(bias, {ElemType::bf16, ElemType::fp16});
  if (!ok)
    return "a " + name(bias) + " bias does not go with " + name(g.a.type) + " operands and a " +
           name(d) + " D (see runtime/gemm/cublaslt_requirements.hpp)";
  return std::nullopt;
}

Problem activation_problem(const GemmArgs& g) {
  if (g.dact != Activation::none || g.dbias || g.d_t)
    return std::string(
        "dact, dbias and the transposed copy of D are epilogues of the generated GEMM only");
  switch (g.activation) {
    case Activation::none:
      if (g.aux) return std::string("aux is written only with an activation");
      return std::nullopt;
    case Activation::relu:
      return std::string(
          "relu: cuBLASLt's RELU_AUX epilogue stores a bit mask, not the pre-activation aux this "
          "runner promises; the executor runs its own activation kernel");
    case Activation::silu:
      return std::string(
          "silu: cuBLASLt has no SiLU epilogue; the executor runs its own activation kernel");
    case Activation::gelu:
      break;
  }
  const ElemType d = g.d_type;
  if (is_fp8(g.a.type) && d == ElemType::fp32)
    return std::string(
        "gelu from FP8 operands: fp8c uses cuBLASLt's FP8 GELU epilogue only with a bf16, fp16 "
        "or e4m3 D");
  if (!g.aux) return std::nullopt;
  if (g.ld_aux < g.b.rows || g.ld_aux % 8 != 0)
    return "ld_aux = " + std::to_string(g.ld_aux) +
           ": cuBLASLt needs the GELU aux ld to be a multiple of 8 and at least N = " +
           std::to_string(g.b.rows);
  if (!is_fp8(g.a.type)) {
    if (g.aux_type != d) return "aux must have D's type (" + name(d) + "), not " + name(g.aux_type);
    return std::nullopt;
  }
  if (d == ElemType::bf16 || d == ElemType::fp16) {
    if (g.aux_type != d) return "aux must have D's type (" + name(d) + "), not " + name(g.aux_type);
    return std::nullopt;
  }
  // FP8 D: cuBLASLt writes a high-precision aux only for e4m3 x e4m3 -> e4m3,
  // and then in C's type, which is the bias type.
  if (d == ElemType::e5m2 || g.a.type != ElemType::e4m3 || g.b.type != ElemType::e4m3)
    return std::string(
        "gelu aux with an FP8 D: cuBLASLt writes a bf16/fp16 aux only for e4m3 x e4m3 -> e4m3");
  const ElemType c_type = g.bias ? g.bias_type : ElemType::bf16;
  if (g.aux_type != c_type)
    return "aux with an e4m3 D must be " + name(c_type) + " (the bias type), not " +
           name(g.aux_type);
  return std::nullopt;
}

bool aligned(CUdeviceptr p, std::int64_t bytes) {
  return p % static_cast<CUdeviceptr>(bytes) == 0;
}

Problem alignment_problem(const GemmArgs& g) {
  const std::int64_t d_bytes = static_cast<std::int64_t>(element_bytes(g.d_type));
  for (const GemmOperand* op : {&g.a, &g.b}) {
    const char* which = op == &g.a ? "A" : "B";
    const std::int64_t bytes = static_cast<std::int64_t>(element_bytes(op->type));
    if (!aligned(op->data, bytes)) return std::string(which) + "'s pointer is not element-aligned";
    // Measured on an H200 (cuBLASLt 13.1): per-tensor scale pointers 4 bytes
    // past a 16-byte boundary make cublasLtMatmul return NOT_SUPPORTED for
    // every FP8 form, although the heuristic offers an algorithm.
    if (op->scale_inv && op->scaling == Scaling::per_tensor && !aligned(op->scale_inv, 16))
      return std::string(which) + "'s scale_inv must be 16-byte aligned";
    if (op->scale_inv && !aligned(op->scale_inv, 4))
      return std::string(which) + "'s scale_inv is not 4-byte aligned";
  }
  for (CUdeviceptr p : {g.d_scale, g.d_amax})
    if (p && !aligned(p, 16)) return std::string("d_scale and d_amax must be 16-byte aligned");
  if (!aligned(g.d, d_bytes)) return std::string("D's pointer is not element-aligned");
  if (!is_fp8(g.a.type)) return std::nullopt;
  // cuBLASLt's FP8 kernels: every matrix 16-byte aligned, every ld a multiple
  // of 16 bytes, K a multiple of 16.
  if (!aligned(g.a.data, 16) || !aligned(g.b.data, 16))
    return std::string("FP8 GEMM: A and B must be 16-byte aligned");
  if (g.a.ld % 16 != 0 || g.b.ld % 16 != 0)
    return "FP8 GEMM: lda and ldb must be multiples of 16 (lda = " + std::to_string(g.a.ld) +
           ", ldb = " + std::to_string(g.b.ld) + ")";
  if (g.a.k % 16 != 0)
    return "FP8 GEMM: K must be a multiple of 16 (K = " + std::to_string(g.a.k) + ")";
  if (!aligned(g.d, 16)) return std::string("FP8 GEMM: D must be 16-byte aligned");
  if ((g.ldd * d_bytes) % 16 != 0)
    return "FP8 GEMM: ldd * sizeof(D) must be a multiple of 16 bytes (ldd = " +
           std::to_string(g.ldd) + ")";
  if (g.bias && !aligned(g.bias, 16)) return std::string("FP8 GEMM: bias must be 16-byte aligned");
  if (g.aux && !aligned(g.aux, 16)) return std::string("FP8 GEMM: aux must be 16-byte aligned");
  return std::nullopt;
}

}  // namespace

std::optional<std::string> cublaslt_form_problem(const GemmArgs& args, std::size_t cublaslt_version,
                                                 int sm) {
  if (auto p = shape_problem(args)) return p;
  if (auto p = operand_type_problem(args, sm)) return p;
  if (auto p = output_type_problem(args)) return p;
  if (auto p = operand_scaling_problem(args.a, "A", sm)) return p;
  if (auto p = operand_scaling_problem(args.b, "B", sm)) return p;
  if (auto p = block_scaling_problem(args, cublaslt_version, sm)) return p;
  if (auto p = bias_problem(args)) return p;
  if (auto p = activation_problem(args)) return p;
  if (auto p = alignment_problem(args)) return p;
  return std::nullopt;
}

}  // namespace fp8c::runtime
