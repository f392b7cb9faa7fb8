#include "codegen/kernels/cuda_activation.hpp"

namespace fp8c {
namespace {

// tanh.approx: one MUFU instruction instead of tanhf's twenty-odd, which
// would make a memory-bound kernel compute-bound.
constexpr const char* kTanhFast = R"(__device__ __forceinline__ float tanh_fast(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
)";

}  // namespace

std::string cuda_activation_function(Activation act) {
  switch (act) {
    case Activation::none:
      return "__device__ __forceinline__ float act(float z) { return z; }\n";
    case Activation::relu:
      // NaN > 0 is false: relu(NaN) = 0, as in runtime/cpu/activation.hpp.
      return "__device__ __forceinline__ float act(float z) { return z > 0.0f ? z : 0.0f; }\n";
    case Activation::gelu:
      return std::string(kTanhFast) + R"(__device__ __forceinline__ float act(float z) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  return 0.5f * z * (1.0f + tanh_fast(k0 * z * (1.0f + k1 * z * z)));
}
)";
    case Activation::silu:
      // Fast intrinsics: IEEE division and expf would cost more than the
      // memory traffic; the result is compared within a bound anyway.
      return R"(__device__ __forceinline__ float act(float z) {
  return __fdividef(z, 1.0f + __expf(-z));
}
)";
  }
  return {};
}

std::string cuda_activation_grad_function(Activation act) {
  switch (act) {
    case Activation::none:
      return "__device__ __forceinline__ float dact(float) { return 1.0f; }\n";
    case Activation::relu:
      return "__device__ __forceinline__ float dact(float x) { return x > 0.0f ? 1.0f : 0.0f; }\n";
    case Activation::gelu:
      return std::string(kTanhFast) + R"(__device__ __forceinline__ float dact(float x) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  const float t = tanh_fast(k0 * x * (1.0f + k1 * x * x));
  return 0.5f * x * ((1.0f - t * t) * (k0 + 3.0f * k0 * k1 * x * x)) + 0.5f * (1.0f + t);
}
)";
    case Activation::silu:
      return R"(__device__ __forceinline__ float dact(float x) {
  const float s = __fdividef(1.0f, 1.0f + __expf(-x));
  return s + x * s * (1.0f - s);
}
)";
  }
  return {};
}

}  // namespace fp8c
