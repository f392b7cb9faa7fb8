// The oracle's derived bounds (docs/verify.md derives each one). Two runs of
// one layer that read the same quantized operands differ only where a sum
// differs: the order of an fp32 GEMM accumulation, the rounding of partial
// sums stored in the layer dtype before a sum over the group, and what an
// epilogue does to such a difference. Each is bounded element by element
// from the dtype's unit roundoff, the number of summands and the summands'
// magnitudes (Higham: |fl(sum) - sum| <= gamma_n sum |terms|), so a
// comparison checks every element against its own bound instead of a
// tolerance picked to pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"
#include "runtime/cpu/verify.hpp"

namespace fp8c::cpu {

// u of a store in `type` with round to nearest even: 2^-p for p significand
// bits (bf16 2^-8, fp16 2^-11, fp32 2^-24, e4m3 2^-4, e5m2 2^-3).
double unit_roundoff(ElemType type);
// Half the spacing of an FP8 format's subnormals (the absolute error of a
// value quantized below the normal range, before the scale is undone).
double fp8_subnormal_half_step(ElemType type);
// sup |act'(z)|: 1 for none and ReLU, 1.13 for tanh-GELU, 1.1 for SiLU.
double activation_lipschitz(Activation a);
// gamma_n = n u / (1 - n u): the bound on a sum of n terms in fp32.
double gamma_fp32(std::uint64_t n);

// How a layer output is made, read from the plan's typed steps: the GEMM
// whose result it is (or whose partial results a collective sums), or a
// column sum (dbias), and the epilogue it goes through after that sum.
struct OutputOrigin {
  const GemmStep* gemm = nullptr;
  bool column_sum = false;         // dbias: column sums of dz over tokens
  int summed_partial = kNoTensor;  // the partial a reduce step sums; kNoTensor: no sum
  // The epilogue the value goes through: the GEMM's own, or the epilogue
  // step after the sum (after_sum).
  const OutputEpilogue* epilogue = nullptr;
  bool after_sum = false;
  bool pre_activation = false;  // the output is that epilogue's z
};
OutputOrigin trace_output(const LayerPlan& plan, int tensor);

// sum_k |a_ik| |b_jk| in float64 for a GEMM step of `plan`, from its
// operands' logical values ([dims[0]][dims[1]], as the executor captures
// them): the magnitude the GEMM's fp32 accumulation error is relative to.
std::vector<double> abs_products(const LayerPlan& plan, const GemmStep& gemm,
                                 const std::vector<float>& a, const std::vector<float>& b);

// What is known about two runs' values of one output before its store:
// `before_store[i]` bounds |r1 - r2| of the unrounded result, `magnitude[i]`
// bounds |r| and every partial's |p| summed (the rounding terms' scale).
struct DifferenceBeforeStore {
  std::vector<double> before_store;
  std::vector<double> magnitude;
};

// The elementwise bound between two runs' stored values of an output with
// origin `o`, given what differs before the store: the epilogue (the fp32
// add of the bias, act's Lipschitz constant, and `act_error` times |value|
// where the two sides evaluate act differently), the store's rounding (u of
// the stored type on each side; an FP8 output also the subnormal step times
// `fp8_scale_inv`). `a`, `b`: the two runs' values.
std::vector<double> store_bound(const OutputOrigin& o, ElemType stored,
                                const DifferenceBeforeStore& d, const std::vector<float>& a,
                                const std::vector<float>& b, double fp8_scale_inv = 1.0,
                                double act_error = 0.0);

// Comparisons, each filling `why` on a FAIL.
CheckResult compare_bitwise(const std::string& layer, const std::string& check,
                            const std::vector<float>& got, const std::vector<float>& want);
CheckResult compare_within(const std::string& layer, const std::string& check,
                           const std::vector<float>& got, const std::vector<float>& want,
                           const std::vector<double>& bound);
CheckResult compare_relative(const std::string& layer, const std::string& check,
                             const std::vector<float>& got, const std::vector<double>& want,
                             double tolerance);

}  // namespace fp8c::cpu
