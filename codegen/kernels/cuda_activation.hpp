// Device text of the activations and their derivatives, the formulas of
// runtime/cpu/activation.hpp in fp32 (GELU is the tanh approximation) with
// the fast instructions the quantize kernels' dact uses: tanh.approx
// (relative error under 2^-10.9) for GELU, __expf / __fdividef for SiLU.
// ReLU and none are exact. runtime/reference/activation_bound.hpp bounds how
// far these may be from the CPU's formulas.
#pragma once

#include <string>

#include "fp8c/spec.hpp"

namespace fp8c {

// Defines `float act(float z)`.
std::string cuda_activation_function(Activation act);

// Defines `float dact(float z)`, act'(z); the same text as the quantize
// kernels' dact, so both give the same bits.
std::string cuda_activation_grad_function(Activation act);

}  // namespace fp8c
