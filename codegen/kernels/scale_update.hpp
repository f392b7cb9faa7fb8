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

#include "codegen/ir/ir.hpp"
#include "codegen/kernels/kernel_source.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

struct ScaleUpdateKernel {
  std::vector<ElemType> formats;  // e4m3 or e5m2, one per tensor, in argument order
  std::uint32_t history_length = 1;
  int margin = 0;  // |margin| <= 100, where fp8_max * 2^-margin is exact
  AmaxAlgo rule = AmaxAlgo::max;
  // Floats from one tensor's previous_scale, scale and scale_inv to the
  // next. The GPU executor uses 4, so that each scale_inv is 16-byte
  // aligned, as cuBLASLt wants its A/B scale pointers.
  int scale_stride = 1;
  // Under `nan = error`: the number of floats of the layer's NaN verdict
  // (its amaxes, agreed over the group) the kernel reads first; if any is
  // NaN it writes nothing, so the state stays as it was (0: no guard).
  int guard = 0;

  int tensors() const { return static_cast<int>(formats.size()); }
  std::string name() const;
  bool operator==(const ScaleUpdateKernel&) const = default;
};

inline constexpr int kScaleUpdateThreads = 256;

// Kernel arguments, in order (tensor k's slice of each):
//   float* history ([tensors][history_length], updated in place),
//   const float* amax ([tensors]), const float* previous_scale ([tensors] at
//   scale_stride), float* scale ([tensors] at scale_stride), float* scale_inv
//   ([tensors] at scale_stride), and with guard > 0 const float* guard
//   ([guard]).
// scale may be previous_scale (updated in place). Grid: one block of
// kScaleUpdateThreads per tensor. build_ir (scale_update_ir.cpp) throws
// std::invalid_argument for a description it cannot build; emit_cuda is
// its CUDA print.
ir::Kernel build_ir(const ScaleUpdateKernel& kernel);
KernelSource emit_cuda(const ScaleUpdateKernel& kernel);

}  // namespace fp8c
