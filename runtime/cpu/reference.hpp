// The float64 reference of one linear layer step: the unquantized math the
// FP8 plans approximate, computed from the same (dtype-rounded) inputs.
#pragma once

#include <utility>
#include <vector>

#include "fp8c/spec.hpp"
#include "runtime/cpu/executor.hpp"

namespace fp8c::cpu {

struct ReferenceResult {
  std::vector<double> z;   // [tokens][out]  x w^T + b
  std::vector<double> y;   // [tokens][out]  act(z)
  std::vector<double> dx;  // [tokens][in]   dz w
  std::vector<double> dw;  // [out][in]      dz^T x
  std::vector<double> db;  // [out]          sum over tokens of dz
};

// `z` (optional, [tokens][out]): the pre-activation backward uses instead
// of its own, so a run's backward is compared given the run's own forward
// (a pre-activation a rounding away can flip act' or an FP8 code of dz).
ReferenceResult reference_layer_step(const Layer& layer, std::uint64_t tokens, const LayerData& d,
                                     const std::vector<float>* z = nullptr);

}  // namespace fp8c::cpu
