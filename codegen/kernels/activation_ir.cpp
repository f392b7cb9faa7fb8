#include "codegen/kernels/activation_ir.hpp"

namespace fp8c {
namespace {

using namespace ir;

constexpr float kK0 = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kK1 = 0.044715f;
constexpr float kLog2e = 1.4426950408889634f;

Expr fma(Expr a, Expr b, Expr c) {
  return intrinsic(Op::fma, {std::move(a), std::move(b), std::move(c)});
}

// tanh(k0 z (1 + k1 z^2)), GELU's inner tanh.
Expr gelu_tanh(Builder& b, Expr z) {
  Expr inner = b.let("gelu_inner", fma(f32(kK1) * z, z, f32(1.0f)));
  return b.let("gelu_t", intrinsic(Op::tanh_approx, {(f32(kK0) * z) * inner}));
}

// 1 + e^-z, SiLU's denominator: e^-z as 2^(-z log2 e).
Expr silu_denominator(Builder& b, Expr z) {
  return b.let("silu_d", f32(1.0f) + intrinsic(Op::ex2_approx, {-z * f32(kLog2e)}));
}

}  // namespace

Expr activation_ir(Builder& b, Activation act, Expr z) {
  switch (act) {
    case Activation::none:
      return z;
    case Activation::relu:
      // NaN > 0 is false: relu(NaN) = 0, as on the CPU.
      return select(z > f32(0.0f), z, f32(0.0f));
    case Activation::gelu: {
      Expr t = gelu_tanh(b, z);
      return (f32(0.5f) * z) * (f32(1.0f) + t);
    }
    case Activation::silu:
      return intrinsic(Op::div_approx, {z, silu_denominator(b, z)});
  }
  return z;
}

Expr activation_grad_ir(Builder& b, Activation act, Expr z) {
  switch (act) {
    case Activation::none:
      return f32(1.0f);
    case Activation::relu:
      return select(z > f32(0.0f), f32(1.0f), f32(0.0f));
    case Activation::gelu: {
      // 0.5 z (1 - t^2)(k0 + 3 k0 k1 z^2) + 0.5 (1 + t)
      Expr t = gelu_tanh(b, z);
      Expr slope = fma(f32(3.0f * kK0 * kK1) * z, z, f32(kK0));
      Expr sech2 = fma(-t, t, f32(1.0f));
      return fma(f32(0.5f) * z, sech2 * slope, f32(0.5f) * (f32(1.0f) + t));
    }
    case Activation::silu: {
      // s + z s (1 - s), s = 1 / (1 + e^-z)
      Expr s = b.let("silu_s", intrinsic(Op::div_approx, {f32(1.0f), silu_denominator(b, z)}));
      return fma(z * s, f32(1.0f) - s, s);
    }
  }
  return f32(1.0f);
}

}  // namespace fp8c
