// The GEMM GPU tests' CPU side: random operands in any GEMM element type,
// a float64 reference of D = A.B^T (+ bias) from the operands as stored
// (decoded and scaled), and the error each element may carry.
//
// Tolerance, per element of D (stated once, used by every GEMM test):
//   |got - want| <= slope * kAccumulationEps * alpha_sum + rounding(out) * |want| + act_allowance
// where alpha_sum = sum_k |a_k * b_k| with the scales applied.
//  - kAccumulationEps = 2^-12: fp32 accumulation of K products in any order
//    stays within gamma_K ~ K * 2^-24 of the exact sum, relative to
//    sum |a_k b_k|, which is 2^-12 for K = 4096, the largest K here. Hopper's
//    FP8 tensor cores keep fewer bits (about 14) while accumulating inside
//    one promotion interval (128 K here); over one interval that error stays
//    below this bound, so promoted accumulation keeps the fp32 bound.
//  - kFastAccumulationEps = 2^-10 instead, for fast accumulation (all of K
//    inside the tensor cores, never promoted): the 14-bit accumulator's
//    error grows with K. Measured on the H200 with the generated GEMM: up to
//    2^-11.6 of alpha_sum (K = 400 to 4096; fp16/fp32 D, where the store's
//    rounding does not hide it), so 2^-10 leaves a factor of 3.
//  - rounding(out): one store rounds by at most the unit roundoff u (2^-8
//    for bf16, 2^-11 fp16, 2^-24 fp32) relative; rounding(out) = 2u, the
//    factor 2 as margin.
//  - gelu: slope = max |gelu'| = 1.13 carries the pre-activation error
//    through, and act_allowance = 5e-4 * (1 + |z|) admits either GELU form
//    (tanh and erf differ by at most 4.8e-4, at |z| = 2.7) and a fast tanh;
//    which form cuBLASLt uses is pinned by a test of its own.
//  - FP8 D: one FP8 rounding of D * d_scale, likewise 2u (2^-3 relative for
//    e4m3, 2^-2 for e5m2) plus the smallest subnormal, on top of the above.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "codegen/plan/plan.hpp"

namespace fp8c::testing {

inline constexpr double kAccumulationEps = 1.0 / 4096;      // 2^-12
inline constexpr double kFastAccumulationEps = 1.0 / 1024;  // 2^-10
inline constexpr double kGeluSlope = 1.13;

// One element of `type` at `bytes` as a float, exactly.
inline float decode(ElemType type, const unsigned char* bytes) {
  switch (type) {
    case ElemType::e4m3:
    case ElemType::e5m2:
      return numerics::fp8_to_float(bytes[0], type);
    case ElemType::fp32: {
      float f;
      std::memcpy(&f, bytes, 4);
      return f;
    }
    default: {
      std::uint16_t h;
      std::memcpy(&h, bytes, 2);
      return type == ElemType::bf16 ? numerics::bf16_to_float(h) : numerics::fp16_to_float(h);
    }
  }
}

// Rounds `x` to `type` (saturating for FP8) and stores it at `bytes`.
inline void encode(ElemType type, float x, unsigned char* bytes) {
  switch (type) {
    case ElemType::e4m3:
    case ElemType::e5m2:
      bytes[0] = numerics::float_to_fp8(x, type, numerics::Saturation::satfinite);
      return;
    case ElemType::fp32:
      std::memcpy(bytes, &x, 4);
      return;
    default: {
      const std::uint16_t h =
          type == ElemType::bf16 ? numerics::float_to_bf16(x) : numerics::float_to_fp16(x);
      std::memcpy(bytes, &h, 2);
    }
  }
}

// A row-major matrix as stored on the device, and its values as the GEMM
// sees them (decoded, times the operand's scales), dense [rows][cols].
struct HostMatrix {
  ElemType type = ElemType::bf16;
  std::int64_t rows = 0, cols = 0, ld = 0;
  std::vector<unsigned char> bytes;  // rows * ld elements
  std::vector<double> values;        // rows * cols

  std::size_t element_size() const { return element_bytes(type); }
  void decode_all(float scale = 1.0f) {
    values.assign(static_cast<std::size_t>(rows * cols), 0.0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        values[r * cols + c] = double(decode(type, &bytes[(r * ld + c) * element_size()])) * scale;
  }
};

// Random values of typical magnitude `sigma` (about 1 in 50 exactly zero),
// rounded to `type`. FP8 values come out spread over the format's range,
// subnormals included.
inline HostMatrix random_matrix(ElemType type, std::int64_t rows, std::int64_t cols,
                                std::int64_t ld, double sigma, std::mt19937& rng) {
  HostMatrix m{type, rows, cols, ld, {}, {}};
  m.bytes.assign(static_cast<std::size_t>(rows * ld) * m.element_size(), 0);
  std::normal_distribution<double> normal(0.0, sigma);
  std::uniform_int_distribution<int> pick(0, 49);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const float x = pick(rng) == 0 ? 0.0f : static_cast<float>(normal(rng));
      encode(type, x, &m.bytes[(r * ld + c) * m.element_size()]);
    }
  m.decode_all();
  return m;
}

// The reference: pre = A.B^T (+ bias), and alpha_sum = sum |a_k b_k|, both
// from the scaled values, in float64, [M][N].
struct GemmReference {
  std::int64_t m = 0, n = 0;
  std::vector<double> pre;
  std::vector<double> abs_sum;
};

inline GemmReference reference_gemm(const HostMatrix& a, const HostMatrix& b,
                                    const std::vector<double>* bias = nullptr) {
  GemmReference ref{a.rows, b.rows, {}, {}};
  const std::int64_t k = a.cols;
  ref.pre.assign(static_cast<std::size_t>(ref.m * ref.n), 0.0);
  ref.abs_sum.assign(ref.pre.size(), 0.0);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (std::int64_t i = t; i < ref.m; i += threads)
        for (std::int64_t j = 0; j < ref.n; ++j) {
          const double* x = &a.values[i * k];
          const double* y = &b.values[j * k];
          double sum = 0, abs_sum = 0;
          for (std::int64_t q = 0; q < k; ++q) {
            sum += x[q] * y[q];
            abs_sum += std::fabs(x[q] * y[q]);
          }
          ref.pre[i * ref.n + j] = sum + (bias ? (*bias)[j] : 0.0);
          ref.abs_sum[i * ref.n + j] = abs_sum;
        }
    });
  for (auto& w : workers) w.join();
  return ref;
}

inline double gelu_tanh(double z) {
  return 0.5 * z * (1.0 + std::tanh(0.7978845608028654 * z * (1.0 + 0.044715 * z * z)));
}

// act(z) in float64: GELU's tanh form, ReLU (NaN -> 0, as fp8c's kernels), SiLU.
inline double activation(Activation act, double z) {
  switch (act) {
    case Activation::gelu:
      return gelu_tanh(z);
    case Activation::relu:
      return z > 0 ? z : 0.0;
    case Activation::silu:
      return z / (1.0 + std::exp(-z));
    case Activation::none:
      break;
  }
  return z;
}

inline double gelu_erf(double z) {
  return 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0)));
}

// Relative rounding allowance of one store to `type` (see the top comment).
inline double output_rounding(ElemType type) {
  switch (type) {
    case ElemType::bf16:
      return 1.0 / 128;
    case ElemType::fp16:
      return 1.0 / 1024;
    case ElemType::fp32:
      return 1.0 / (1 << 23);
    case ElemType::e4m3:
      return 1.0 / 8;
    case ElemType::e5m2:
      return 1.0 / 4;
    default:
      return 0;
  }
}

// Largest finite value of a high-precision `type`: past it (by half an ulp)
// a store rounds to infinity.
inline double output_max(ElemType type) {
  switch (type) {
    case ElemType::fp16:
      return numerics::fp16_to_float(numerics::kFp16MaxCode);
    case ElemType::bf16:
      return numerics::bf16_to_float(0x7F7F);  // exponent 254, every mantissa bit
    default:
      return std::numeric_limits<float>::max();
  }
}

// Smallest positive subnormal of `type`: the absolute error floor of a store.
inline double output_floor(ElemType type) {
  switch (type) {
    case ElemType::fp16:
      return std::ldexp(1.0, -24);
    case ElemType::e4m3:
      return std::ldexp(1.0, -9);
    case ElemType::e5m2:
      return std::ldexp(1.0, -16);
    default:
      return 0;
  }
}

}  // namespace fp8c::testing
