// The CUDA C++ printer for RankReduceKernel.
//
// Each element type contributes a few helpers (elem_t, acc_t, widen, add,
// narrow, cmp_t, to_cmp, is_nan_cmp); one kernel body, printed for sum or
// max, uses them. The helpers mirror collectives/reduce.cpp and
// collectives/narrow_float.cpp line by line, with integer bit operations
// and explicitly rounded float adds (__fadd_rn, __dadd_rn), so neither
// -fmad nor the conversion instructions' NaN rules can make the GPU differ
// from the CPU reference. One element per thread per round: this kernel
// serves the correctness-checking single-GPU mode, not a fast path.

#include <stdexcept>

#include "codegen/kernels/cuda_prelude.hpp"
#include "codegen/kernels/cuda_rank_arith.hpp"
#include "codegen/kernels/rank_reduce.hpp"

namespace fp8c {
namespace {

// Float add as the CPU reference gets it on x86-64 (SSE): a NaN operand
// comes out quiet (the running total's first), and Inf + -Inf is the
// default NaN. Everything else is an IEEE round-to-nearest add, identical
// on both sides.
constexpr const char* kFloatAdd = R"(
__device__ __forceinline__ float add(float a, float b) {
  const u32 ab = __float_as_uint(a), bb = __float_as_uint(b);
  if ((ab & 0x7FFFFFFFu) > 0x7F800000u) return __uint_as_float(ab | 0x00400000u);
  if ((bb & 0x7FFFFFFFu) > 0x7F800000u) return __uint_as_float(bb | 0x00400000u);
  const float s = __fadd_rn(a, b);
  return s != s ? __uint_as_float(0xFFC00000u) : s;
}
)";

constexpr const char* kDoubleAdd = R"(
__device__ __forceinline__ double add(double a, double b) {
  const u64 ab = (u64)__double_as_longlong(a), bb = (u64)__double_as_longlong(b);
  const u64 magnitude = 0x7FFFFFFFFFFFFFFFull, infinity = 0x7FF0000000000000ull;
  const u64 quiet = 0x0008000000000000ull;
  if ((ab & magnitude) > infinity) return __longlong_as_double((long long)(ab | quiet));
  if ((bb & magnitude) > infinity) return __longlong_as_double((long long)(bb | quiet));
  const double s = __dadd_rn(a, b);
  return s != s ? __longlong_as_double((long long)0xFFF8000000000000ull) : s;
}
)";

// `value >> shift` rounded to nearest, ties to even (narrow_float.cpp).
constexpr const char* kShiftRightRne = R"(
__device__ __forceinline__ u32 shift_right_rne(u32 value, unsigned shift) {
  const u32 kept = value >> shift;
  const u32 dropped = value & ((1u << shift) - 1u);
  const u32 half = 1u << (shift - 1u);
  const bool round_up = dropped > half || (dropped == half && (kept & 1u) != 0u);
  return kept + (round_up ? 1u : 0u);
}
)";

constexpr const char* kBf16 = R"(
typedef u16 elem_t;
typedef float acc_t;
typedef float cmp_t;
__device__ __forceinline__ float widen(u16 bits) { return __uint_as_float(u32(bits) << 16); }
// NaN keeps sign and top payload bits and is made quiet; the rest rounds RNE,
// carries into the exponent and up to infinity included.
__device__ __forceinline__ u16 narrow(float value) {
  const u32 bits = __float_as_uint(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return u16((bits >> 16) | 0x0040u);
  return u16(shift_right_rne(bits, 16));
}
)";

constexpr const char* kF16 = R"(
typedef u16 elem_t;
typedef float acc_t;
typedef float cmp_t;
// Exact; NaN made quiet with its payload, as the CPU reference widens.
__device__ __forceinline__ float widen(u16 bits) {
  const u32 sign = u32(bits & 0x8000u) << 16;
  const u32 exponent = (bits >> 10) & 0x1Fu, mantissa = bits & 0x3FFu;
  if (exponent == 0x1Fu)
    return __uint_as_float(sign | 0x7F800000u | (mantissa != 0u ? 0x00400000u : 0u) | (mantissa << 13));
  if (exponent == 0u)  // zero or subnormal: mantissa * 2^-24, exact in float
    return __uint_as_float(sign | __float_as_uint(__fmul_rn(__uint2float_rn(mantissa), 5.9604644775390625e-8f)));
  return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}
__device__ __forceinline__ u16 narrow(float value) {
  const u32 bits = __float_as_uint(value);
  const u16 sign = u16((bits >> 16) & 0x8000u);
  const u32 magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return u16(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  if (magnitude >= 0x477FF000u) return u16(sign | 0x7C00u);  // 65520 and up: infinity
  const u32 exponent = magnitude >> 23;
  if (exponent < 113u) {  // a float16 subnormal or zero, in units of 2^-24
    if (exponent == 0u) return sign;
    const u32 significand = (magnitude & 0x7FFFFFu) | 0x800000u;
    const unsigned shift = 126u - exponent;
    if (shift > 24u) return sign;
    return u16(sign | shift_right_rne(significand, shift));
  }
  return u16(sign | shift_right_rne(magnitude - (112u << 23), 13));
}
)";

// The loop body for one element i of one output; `in(r)` is rank r's input.
constexpr const char* kSumBody = R"(
    acc_t total = widen(first);
    for (int r = 1; r < ranks; ++r) total = add(total, widen(in(r)));
    out[i] = ranks == 1 ? first : narrow(total);
)";

// NaN wins (and stops the search), then the larger; the earlier rank on ties.
constexpr const char* kMaxBody = R"(
    elem_t best = first;
    cmp_t best_value = to_cmp(best);
    for (int r = 1; r < ranks; ++r) {
      if (is_nan_cmp(best_value)) break;
      const elem_t candidate = in(r);
      const cmp_t candidate_value = to_cmp(candidate);
      if (candidate_value > best_value || is_nan_cmp(candidate_value)) {
        best = candidate;
        best_value = candidate_value;
      }
    }
    out[i] = best;
)";

// The element's name in kernel names: f32, f16 and f64 where to_string says
// fp32, fp16 and fp64. The names predate the one ElemType and are part of
// each kernel's source (its entry point) and cache key, so they stay.
std::string_view kernel_name_of(ElemType element) {
  switch (element) {
    case ElemType::fp32:
      return "f32";
    case ElemType::bf16:
      return "bf16";
    case ElemType::fp16:
      return "f16";
    case ElemType::fp64:
      return "f64";
    case ElemType::i32:
      return "i32";
    case ElemType::u8:
      return "u8";
    case ElemType::e4m3:
    case ElemType::e5m2:
    case ElemType::e8m0:
      break;
  }
  throw std::invalid_argument("rank_reduce: " + std::string(to_string(element)) +
                              " is never reduced");
}

}  // namespace

std::string rank_element_helpers(ElemType element) {
  std::string s;
  switch (element) {
    case ElemType::fp32:
      s = "typedef float elem_t;\ntypedef float acc_t;\ntypedef float cmp_t;\n";
      s += "__device__ __forceinline__ float widen(float x) { return x; }\n";
      s += "__device__ __forceinline__ float narrow(float x) { return x; }\n";
      s += kFloatAdd;
      break;
    case ElemType::fp64:
      s = "typedef double elem_t;\ntypedef double acc_t;\ntypedef double cmp_t;\n";
      s += "__device__ __forceinline__ double widen(double x) { return x; }\n";
      s += "__device__ __forceinline__ double narrow(double x) { return x; }\n";
      s += kDoubleAdd;
      break;
    case ElemType::bf16:
      s = std::string(kShiftRightRne) + kBf16 + kFloatAdd;
      break;
    case ElemType::fp16:
      s = std::string(kShiftRightRne) + kF16 + kFloatAdd;
      break;
    case ElemType::i32:
      // Sums in unsigned arithmetic: wraps modulo 2^32 like the CPU reference.
      s = "typedef int elem_t;\ntypedef u32 acc_t;\ntypedef int cmp_t;\n";
      s += "__device__ __forceinline__ u32 widen(int x) { return u32(x); }\n";
      s += "__device__ __forceinline__ int narrow(u32 x) { return int(x); }\n";
      s += "__device__ __forceinline__ u32 add(u32 a, u32 b) { return a + b; }\n";
      break;
    case ElemType::u8:
      s = "typedef u8 elem_t;\ntypedef u32 acc_t;\ntypedef u32 cmp_t;\n";
      s += "__device__ __forceinline__ u32 widen(u8 x) { return u32(x); }\n";
      s += "__device__ __forceinline__ u8 narrow(u32 x) { return u8(x); }\n";
      s += "__device__ __forceinline__ u32 add(u32 a, u32 b) { return a + b; }\n";
      break;
    case ElemType::e4m3:
    case ElemType::e5m2:
    case ElemType::e8m0:
      throw std::invalid_argument("rank_reduce: " + std::string(to_string(element)) +
                                  " is never reduced");
  }
  const bool is_float = element == ElemType::fp32 || element == ElemType::fp64 ||
                        element == ElemType::bf16 || element == ElemType::fp16;
  s += "__device__ __forceinline__ cmp_t to_cmp(elem_t x) { return ";
  s += element == ElemType::bf16 || element == ElemType::fp16 ? "widen(x)" : "cmp_t(x)";
  s += "; }\n";
  s += "__device__ __forceinline__ bool is_nan_cmp(cmp_t x) { return ";
  s += is_float ? "x != x" : "false";
  s += "; }\n";
  return s;
}

std::string RankReduceKernel::name() const {
  return std::string("rank_reduce_") + (op == RankReduceOp::sum ? "sum_" : "max_") +
         std::string(kernel_name_of(element));
}

KernelSource emit_cuda(const RankReduceKernel& k) {
  if (k.op != RankReduceOp::sum && k.op != RankReduceOp::max)
    throw std::invalid_argument("rank_reduce: invalid op");
  std::string s = cuda_prelude();
  s += "#define MAX_RANKS " + std::to_string(kRankMaxRanks) + "\n";
  s += "struct RankPointers { u64 p[MAX_RANKS]; };\n";
  s += rank_element_helpers(k.element);
  s += "\nextern \"C\" __global__ void __launch_bounds__(" + std::to_string(kRankReduceThreads) +
       ")\n" + k.name();
  s += R"((RankPointers inputs, int ranks, u64 input_stride, RankPointers outputs, u64 count) {
  const u64 offset = u64(blockIdx.y) * input_stride;
  elem_t* out = reinterpret_cast<elem_t*>(outputs.p[blockIdx.y]);
  const u64 step = u64(gridDim.x) * blockDim.x;
  for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
#define in(r) reinterpret_cast<const elem_t*>(inputs.p[r])[offset + i]
    const elem_t first = in(0);
)";
  s += k.op == RankReduceOp::sum ? kSumBody : kMaxBody;
  s += R"(#undef in
  }
}
)";
  return {k.name(), k.name(), std::move(s), {}};
}

}  // namespace fp8c
