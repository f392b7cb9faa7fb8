// The float64 reference of one linear layer step: the unquantized math the
// FP8 plans approximate, computed from the same (dtype-rounded) inputs.
#pragma once

#include <utility>
#include <vector>

#include "fp8c/spec.hpp"
#include "runtime/cpu/executor.hpp"

namespace fp8c::cpu {

struct ReferenceResult {
  std::vector<double> y;   // [tokens][out]  act(x w^T + b)
  std::vector<double> dx;  // [tokens][in]   dz w
  std::vector<double> dw;  // [out][in]      dz^T x
  std::vector<double> db;  // [out]          sum over tokens of dz
};

ReferenceResult reference_layer_step(const Layer& layer, std::uint64_t tokens, const LayerData& d);

// A producer -> consumer chain: the consumer reads the producer's float64
// output, the producer's gradient is the consumer's float64 dX.
std::pair<ReferenceResult, ReferenceResult> reference_chain_step(const Layer& first,
                                                                 const Layer& second,
                                                                 std::uint64_t tokens,
                                                                 const ChainData& d);

}  // namespace fp8c::cpu
