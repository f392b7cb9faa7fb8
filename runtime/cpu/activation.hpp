// Activations and their derivatives as the generated kernels compute them
// (fp32; GELU is the tanh approximation), templated so the float64
// reference uses the same formulas.
#pragma once

#include <cmath>

#include "fp8c/spec.hpp"

namespace fp8c::cpu {

template <typename T>
T activate(Activation act, T z) {
  switch (act) {
    case Activation::none:
      return z;
    case Activation::relu:
      return z > T(0) ? z : T(0);
    case Activation::gelu: {
      const T k0 = T(0.7978845608028654), k1 = T(0.044715);
      return T(0.5) * z * (T(1) + std::tanh(k0 * z * (T(1) + k1 * z * z)));
    }
    case Activation::silu:
      return z / (T(1) + std::exp(-z));
  }
  return z;
}

template <typename T>
T activation_grad(Activation act, T z) {
  switch (act) {
    case Activation::none:
      return T(1);
    case Activation::relu:
      return z > T(0) ? T(1) : T(0);
    case Activation::gelu: {
      const T k0 = T(0.7978845608028654), k1 = T(0.044715);
      const T t = std::tanh(k0 * z * (T(1) + k1 * z * z));
      return T(0.5) * z * ((T(1) - t * t) * (k0 + T(3) * k0 * k1 * z * z)) + T(0.5) * (T(1) + t);
    }
    case Activation::silu: {
      const T s = T(1) / (T(1) + std::exp(-z));
      return s + z * s * (T(1) - s);
    }
  }
  return T(1);
}

}  // namespace fp8c::cpu
