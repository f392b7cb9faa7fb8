// An epilogue kernel's inputs and how its outputs are judged against the CPU
// reference (runtime/reference/epilogue_reference), shared by the GPU test
// (epilogue_gpu_test.cpp, both backends) and the CPU emulation of the
// kernel's IR (tests/emulation/epilogue_emulation_test.cpp):
//   Bit for bit: the bias add, z, casts, FP8, amax, and everything of the
//   none and relu variants, dbias included (the kernel's summation order is
//   the reference's; a NaN sum compares as NaN, its payload is the CPU's).
//   Within activation_bound.hpp's bounds: y of GELU / SiLU (tanh.approx,
//   ex2.approx, div.approx on the GPU; the emulation's host twins are the
//   C library's functions), v = dy * act'(z) and its dbias partials and
//   sums (the per-element bounds summed, plus 2 n 2^-24 sum |v| for the
//   roundings of n additions; a subnormal v's rounding is absolute, 2^-149),
//   amax (the largest per-element bound).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/kernels/epilogue.hpp"
#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "runtime/cpu/activation.hpp"
#include "runtime/reference/activation_bound.hpp"
#include "runtime/reference/element.hpp"
#include "runtime/reference/epilogue_reference.hpp"

namespace fp8c::testing {

enum class Data { finite, any_bits };

// Raw element bits of `type`: finite data spans normal values, input-type
// subnormals, zeros of both signs and values far past the FP8 range;
// any_bits is every pattern, NaN and Inf included.
inline std::vector<unsigned char> random_input(ElemType type, std::size_t n, Data data,
                                               std::mt19937& rng) {
  const std::size_t width = element_bytes(type);
  std::vector<unsigned char> bytes(std::max<std::size_t>(n, 1) * width);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::uniform_int_distribution<int> pick(0, 99);
  for (std::size_t i = 0; i < n; ++i) {
    float v = normal(rng);
    const int p = pick(rng);
    if (p < 5)
      v *= 1e4f;
    else if (p < 10)
      v *= 1e-6f;
    else if (p < 12)
      v = p == 10 ? 0.0f : -0.0f;
    std::uint32_t raw32 = std::bit_cast<std::uint32_t>(v);
    std::uint16_t raw16 =
        type == ElemType::bf16 ? numerics::float_to_bf16(v) : numerics::float_to_fp16(v);
    if (p == 12) {
      raw16 = static_cast<std::uint16_t>(bits(rng) & 0x83FF);  // subnormal of the input type
      raw32 = bits(rng) & 0x807FFFFFu;
    }
    if (data == Data::any_bits) {
      raw32 = bits(rng);
      raw16 = static_cast<std::uint16_t>(bits(rng));
    }
    if (width == 4)
      std::memcpy(&bytes[i * 4], &raw32, 4);
    else
      std::memcpy(&bytes[i * 2], &raw16, 2);
  }
  return bytes;
}

// What one run reads: x (or dy), bias, pre (z) as raw input-type bits, and
// the FP8 output's scale.
struct EpilogueInputs {
  std::int64_t rows = 0, cols = 0;
  std::vector<unsigned char> x, bias, pre;
  float scale = 1.0f;
};

inline EpilogueInputs epilogue_inputs(const EpilogueKernel& k, int rows, int cols, Data data,
                                      std::uint32_t seed) {
  std::mt19937 rng(seed);
  EpilogueInputs in;
  in.rows = rows;
  in.cols = cols;
  const auto n = static_cast<std::size_t>(in.rows * in.cols);
  in.x = random_input(k.input, n, data, rng);
  in.bias = random_input(k.input, static_cast<std::size_t>(cols), Data::finite, rng);
  in.pre = random_input(k.input, n, Data::finite, rng);
  in.scale = std::uniform_real_distribution<float>(0.5f, 300.0f)(rng);
  return in;
}

// What the kernel wrote; dbias (the partials added in tile order by the
// dbias reduce kernel) only where the caller ran that.
struct EpilogueOutputs {
  std::vector<std::uint8_t> out, pre_out;
  std::uint32_t amax_bits = 0;
  std::vector<float> dbias_partial, dbias;
};

namespace epilogue_check_detail {

inline double stored_value(ElemType type, const std::uint8_t* data, std::int64_t i) {
  if (is_fp8(type)) return numerics::fp8_to_float(data[i], type);
  return runtime::load_element(type, data, i);
}

inline bool same_float(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

}  // namespace epilogue_check_detail

// Every output of `k` the run made, against the reference on `in`.
inline void expect_epilogue_matches_reference(const EpilogueKernel& k, const EpilogueInputs& in,
                                              const EpilogueOutputs& got) {
  using namespace epilogue_check_detail;
  using runtime::load_element;
  using runtime::reference_epilogue_value;
  const runtime::EpilogueResult want = runtime::reference_epilogue(
      k, in.x.data(), in.bias.data(), in.pre.data(), in.scale, in.rows, in.cols);
  const std::int64_t rows = in.rows, cols = in.cols;
  const auto n = static_cast<std::size_t>(rows * cols);
  const ElemType out_type = k.output;
  const std::size_t out_width = element_bytes(out_type);
  const bool exact = k.activation == Activation::none || k.activation == Activation::relu;
  const auto value = [&](std::int64_t i, float* z) {
    return reference_epilogue_value(k, in.x.data(), in.bias.data(), in.pre.data(), i, cols, z);
  };
  // The bound on |kernel - reference| of the value stored at element i,
  // before its rounding to the output type (FP8: in scaled units).
  const auto bound = [&](std::int64_t i) {
    float z = 0.0f;
    const float v = value(i, &z);
    if (!k.backward)
      return runtime::activation_error_bound(k.activation, z) * (k.fp8_output() ? in.scale : 1.0);
    const double dy = load_element(k.input, in.x.data(), i);
    return runtime::backward_value_error_bound(k.activation, dy, z, v);
  };
  // dy = +-Inf times an act'(z) whose bound reaches zero (tanh.approx gives
  // exactly +-1 where tanhf is 1 - 2^-25): Inf * 0 = NaN in the kernel where
  // the reference has an infinity. Either is what the bound allows, for the
  // element and for its column's dbias.
  const auto inf_times_zero = [&](std::int64_t i) {
    if (!k.backward || exact) return false;
    float z = 0.0f;
    value(i, &z);
    const double dy = load_element(k.input, in.x.data(), i);
    const double grad = cpu::activation_grad(k.activation, static_cast<double>(z));
    return std::isinf(dy) &&
           std::fabs(grad) <= runtime::activation_grad_error_bound(k.activation, z);
  };

  ASSERT_EQ(got.out.size(), n * out_width) << "out";
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto e = static_cast<std::int64_t>(i);
    bool ok = exact ? std::memcmp(&got.out[i * out_width], &want.out[i * out_width], out_width) == 0
                    : runtime::close_after_rounding(stored_value(out_type, got.out.data(), e),
                                                    stored_value(out_type, want.out.data(), e),
                                                    bound(e), out_type);
    if (!ok) ok = inf_times_zero(e) && std::isnan(stored_value(out_type, got.out.data(), e));
    if (!ok && ++mismatches <= 5)
      ADD_FAILURE() << "out[" << i << "] (row " << i / cols << ", col " << i % cols
                    << ") = " << stored_value(out_type, got.out.data(), e) << ", want "
                    << stored_value(out_type, want.out.data(), e) << " (x "
                    << load_element(k.input, in.x.data(), e) << ")";
  }
  EXPECT_EQ(mismatches, 0u) << "out";
  if (k.store_pre) {
    ASSERT_EQ(got.pre_out.size(), want.pre_out.size()) << "z";
    const auto m = std::mismatch(got.pre_out.begin(), got.pre_out.end(), want.pre_out.begin());
    EXPECT_TRUE(m.first == got.pre_out.end())
        << "z differs at byte " << (m.first - got.pre_out.begin());
  }
  if (k.amax) {
    const float got_amax = std::bit_cast<float>(got.amax_bits),
                want_amax = std::bit_cast<float>(want.amax_bits);
    if (exact) {
      EXPECT_EQ(got.amax_bits, want.amax_bits) << got_amax << " vs " << want_amax;
    } else {
      double largest = 0;
      for (std::size_t i = 0; i < n; ++i)
        largest = std::fmax(
            largest, bound(static_cast<std::int64_t>(i)) / (k.fp8_output() ? in.scale : 1.0));
      EXPECT_TRUE(same_float(got_amax, want_amax) || std::fabs(got_amax - want_amax) <= largest)
          << got_amax << " vs " << want_amax << " (bound " << largest << ")";
    }
  }
  if (!k.dbias) return;
  // A column sum of rows [r0, r1): the kernel's value against the
  // reference's; false (and a failure) if they differ.
  const auto check_sum = [&](const char* what, std::int64_t at, float g, float w, std::int64_t c,
                             std::int64_t r0, std::int64_t r1) {
    if (exact) {
      EXPECT_TRUE(same_float(g, w)) << what << "[" << at << "] = " << g << ", want " << w;
      return same_float(g, w);
    }
    double sum_bounds = 0, magnitude = 0;
    for (std::int64_t r = r0; r < r1; ++r) {
      sum_bounds += bound(r * cols + c);
      magnitude += std::fabs(value(r * cols + c, nullptr));
    }
    const double tolerance = sum_bounds + 2.0 * static_cast<double>(r1 - r0) * 0x1p-24 * magnitude;
    // A NaN sum is allowed only where the column holds an allowed Inf * 0
    // (looked for only then: it re-evaluates the reference per row).
    const auto nan_allowed = [&] {
      for (std::int64_t r = r0; r < r1; ++r)
        if (inf_times_zero(r * cols + c)) return true;
      return false;
    };
    const bool ok =
        same_float(g, w) || std::fabs(g - w) <= tolerance || (std::isnan(g) && nan_allowed());
    EXPECT_TRUE(ok) << what << "[" << at << "] = " << g << ", want " << w << " (tolerance "
                    << tolerance << ")";
    return ok;
  };
  const std::int64_t tiles = (rows + kEpilogueDbiasTileRows - 1) / kEpilogueDbiasTileRows;
  ASSERT_EQ(got.dbias_partial.size(), static_cast<std::size_t>(tiles * cols)) << "dbias_partial";
  for (std::int64_t t = 0; t < tiles; ++t)
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto at = static_cast<std::size_t>(t * cols + c);
      if (!check_sum("dbias_partial", t * cols + c, got.dbias_partial[at], want.dbias_partial[at],
                     c, t * kEpilogueDbiasTileRows,
                     std::min(rows, (t + 1) * kEpilogueDbiasTileRows)))
        return;  // the first difference only
    }
  if (got.dbias.empty()) return;
  ASSERT_EQ(got.dbias.size(), static_cast<std::size_t>(cols)) << "dbias";
  for (std::int64_t c = 0; c < cols; ++c)
    if (!check_sum("dbias", c, got.dbias[static_cast<std::size_t>(c)],
                   want.dbias[static_cast<std::size_t>(c)], c, 0, rows))
      return;
}

}  // namespace fp8c::testing
