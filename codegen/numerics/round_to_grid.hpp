#pragma once
// The one rounding step that FP8 and FP16 encoding share: snap a non-negative
// binary value (given as IEEE bits of float or double) to the grid of a
// narrower format with round-to-nearest-even. It works on integers only, so
// the result never depends on the FPU rounding mode, -ffast-math or FMA
// contraction, and it is constexpr so tests and device code can reuse it.

#include <cstdint>

namespace fp8c::numerics::detail {

// IEEE layout of the wide source format.
template <typename Bits>
struct SourceLayout;
template <>
struct SourceLayout<std::uint32_t> {
  static constexpr int mantissa_bits = 23;
  static constexpr int bias = 127;
};
template <>
struct SourceLayout<std::uint64_t> {
  static constexpr int mantissa_bits = 52;
  static constexpr int bias = 1023;
};

// `magnitude` is a finite or infinite value with the sign bit cleared (NaN is
// the caller's job). Returns the narrow format's code for it as an unbounded
// integer: codes above the format's largest finite code mean "overflowed after
// rounding", which is exactly the test that both satfinite and IEEE overflow
// need (E4M3 448 + half an ulp = 464 ties to even and stays 448; E5M2 57344 +
// half an ulp = 61440 ties to the code above max and overflows, as in CUDA).
// The encoding is the usual biased one: code = (biased_exponent << mantissa) |
// fraction, with subnormals at biased exponent 0.
template <int kMantissaBits, int kBias, typename Bits>
constexpr std::uint32_t round_to_grid(Bits magnitude) {
  using Layout = SourceLayout<Bits>;
  constexpr int src_m = Layout::mantissa_bits;
  const int biased = static_cast<int>(magnitude >> src_m);
  Bits significand = magnitude & ((Bits{1} << src_m) - 1);
  if (biased != 0) significand |= Bits{1} << src_m;
  const int exponent = (biased == 0 ? 1 : biased) - Layout::bias;

  // Below the narrow format's smallest normal exponent its spacing stops
  // shrinking (subnormals), so the grid exponent is clamped there.
  constexpr int min_normal_exponent = 1 - kBias;
  const int grid_exponent = exponent > min_normal_exponent ? exponent : min_normal_exponent;

  // significand * 2^(exponent - src_m) expressed in units of the grid spacing
  // 2^(grid_exponent - kMantissaBits) needs a right shift by `shift` >= 1.
  // A shift past src_m + 2 already rounds everything to zero (the half-way
  // point exceeds any significand), and clamping it keeps the shift defined.
  int shift = src_m - kMantissaBits + (grid_exponent - exponent);
  if (shift > src_m + 2) shift = src_m + 2;
  const Bits half_minus_one = (Bits{1} << (shift - 1)) - 1;
  const Bits odd = (significand >> shift) & 1;
  const Bits units = (significand + half_minus_one + odd) >> shift;

  // units is in [2^m, 2^(m+1)] for normals and [0, 2^m] for subnormals; in
  // both cases adding it to the exponent field minus the implicit bit gives
  // the code, and a carry out of the fraction lands in the exponent as it
  // should.
  const auto exponent_field = static_cast<std::uint32_t>(grid_exponent + kBias);
  return (exponent_field << kMantissaBits) + static_cast<std::uint32_t>(units) -
         (std::uint32_t{1} << kMantissaBits);
}

}  // namespace fp8c::numerics::detail
