// The transpose, permute and scale-update kernel variants the tests cover.
#pragma once

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
