// The delayed-scaling update of all of a layer's per-tensor scaled tensors in
// one launch, bit-exact with codegen/numerics (amax_from_history,
// delayed_scaling_update, scale_inverse). Per tensor, with this step's amax
// already MAX-reduced over the tensor-parallel group:
//   history = [amax, history[0 .. len-2]]       (history[0] is the newest)
//   a       = max |history| (NaN wins) | history[0]      by `rule`
//   scale   = (fp8_max * 2^-margin) / a, FLT_MAX if that is +Inf;
//             the previous scale if a is NaN, +-Inf, zero or negative
//   scale_inv = 1 / scale
// Both divisions are IEEE round-to-nearest (div.rn.f32 in PTX, no flush to
// zero), whatever NVRTC's math flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernels/kernel_source.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

struct ScaleUpdateKernel {
  std::vector<Fp8Format> formats;  // one per tensor, in argument order
  std::uint32_t history_length = 1;
  int margin = 0;  // |margin| <= 100, where fp8_max * 2^-margin is exact
  AmaxAlgo rule = AmaxAlgo::max;

  int tensors() const { return static_cast<int>(formats.size()); }
  std::string name() const;
  bool operator==(const ScaleUpdateKernel&) const = default;
};

inline constexpr int kScaleUpdateThreads = 256;

// Kernel arguments, in order (tensor k's slice of each):
//   float* history ([tensors][history_length], updated in place),
//   const float* amax ([tensors]), const float* previous_scale ([tensors]),
//   float* scale ([tensors]), float* scale_inv ([tensors]).
// scale may be previous_scale (updated in place). Grid: one block of
// kScaleUpdateThreads per tensor.
KernelSource emit_cuda(const ScaleUpdateKernel& kernel);

}  // namespace fp8c
