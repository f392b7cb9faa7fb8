// The transpose, permute and scale-update kernel variants the tests cover,
// and the amaxes the scale-update tests feed them.
#pragma once

#include <bit>
#include <limits>
#include <vector>

#include "codegen/lower/lowered.hpp"

namespace fp8c::testing {

inline std::vector<ScaleUpdateKernel> scale_update_variants() {
  std::vector<ScaleUpdateKernel> all;
  const std::vector<ElemType> mixed = {ElemType::e4m3, ElemType::e4m3, ElemType::e5m2,
                                       ElemType::e4m3, ElemType::e5m2};
  for (AmaxAlgo rule : {AmaxAlgo::max, AmaxAlgo::most_recent})
    for (std::uint32_t history : {1u, 16u, 300u, 1024u})
      for (int margin : {0, 3, -2}) all.push_back({mixed, history, margin, rule});
  all.push_back({{ElemType::e5m2}, 1024, 100, AmaxAlgo::max});
  all.push_back({{ElemType::e4m3}, 513, -100, AmaxAlgo::max});
  return all;
}

// Amaxes that exercise every guard: NaN (two payloads), +-Inf, +-0, negative,
// subnormal, tiny enough that the quotient overflows, huge, ordinary.
inline std::vector<float> special_amaxes() {
  const float inf = std::numeric_limits<float>::infinity();
  return {std::bit_cast<float>(0x7FC00000u),
          std::bit_cast<float>(0xFFFFFFFFu),
          inf,
          -inf,
          0.0f,
          -0.0f,
          -3.5f,
          std::bit_cast<float>(0x00000001u),
          std::bit_cast<float>(0x007FFFFFu),
          1e-37f,
          std::numeric_limits<float>::max(),
          1.0f,
          3.14159f,
          448.0f,
          57344.0f,
          0.1f};
}

inline std::vector<GeneratedKernel> other_kernel_variants() {
  std::vector<GeneratedKernel> all = {{TransposeKernel{}},
                                      {TransposeKernel{4}},
                                      {PermuteKernel{1}},
                                      {PermuteKernel{2}},
                                      {PermuteKernel{4}}};
  for (const auto& k : scale_update_variants()) all.push_back({k});
  // Guarded by a NaN verdict (nan = error), as the GPU executor launches it.
  ScaleUpdateKernel guarded{
      {ElemType::e4m3, ElemType::e4m3, ElemType::e5m2}, 1024, 0, AmaxAlgo::max};
  guarded.scale_stride = 4;
  guarded.guard = 3;
  all.push_back({guarded});
  return all;
}

}  // namespace fp8c::testing
