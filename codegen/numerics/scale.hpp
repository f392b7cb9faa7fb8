#pragma once
// Scale math shared by every recipe. A quantization scale multiplies the
// high-precision value before the FP8 cast: q = float_to_fp8(x * scale);
// dequantization multiplies by scale_inverse(scale).
//
// Recipe -> helper:
//   delayed    delayed_scaling_update(history, rule, format, margin, previous)
//   current    scale_from_amax(amax, format, 1.0f)
//   blockwise  blockwise_scale(block_amax, format, power_of_two) per 1x128 / 128x128 block
//   mxfp8      mx_block_scale(block_amax, format, rule) per 1x32 block, an E8M0
//              code (mx_scale.hpp)

#include <cstdint>
#include <span>

#include "codegen/numerics/amax.hpp"
#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/mx_scale.hpp"

namespace fp8c::numerics {

struct ScaleRule {
  // Delayed scaling's margin: the scale is divided by 2^margin, leaving
  // headroom for amax growth between updates. Meant for |margin| <= 100, where
  // fp8_max * 2^-margin is exact.
  int margin = 0;
  // Round the scale down to a power of two, so scaling is exact and the
  // scale's inverse is too (blockwise recipe's "pow2" scales).
  bool power_of_two = false;
  // An amax below this is raised to it first (TransformerEngine's epsilon);
  // with the default 0, an all-zero tensor gets the fallback.
  float amax_floor = 0.0f;
};

// scale = (fp8_max / amax) / 2^margin, with these guards, in this order:
//  1. amax < rule.amax_floor: amax = rule.amax_floor.
//  2. amax is NaN, +-Inf, zero or negative: return `fallback` unchanged. There
//     is nothing to learn from such an amax: delayed scaling passes the
//     previous scale (keep going as before), current and blockwise pass 1.0.
//  3. scale = (fp8_max * 2^-margin) / amax as one correctly rounded float
//     division (TransformerEngine's order; it equals (fp8_max / amax) /
//     2^margin except where that would overflow or go subnormal).
//  4. scale == +Inf (amax < fp8_max / FLT_MAX, about 1.3e-36 for E4M3):
//     FLT_MAX, TransformerEngine's choice for delayed and current scaling. (Its
//     current-scaling kernel uses the input dtype's max instead, 0x1.FEp127 for
//     bf16 input; with power_of_two both become 2^127.)
//  5. rule.power_of_two: round_down_to_power_of_two(scale).
// `format` is e4m3 or e5m2 (else std::invalid_argument), here and below.
float scale_from_amax(float amax, ElemType format, float fallback, ScaleRule rule = {});

// Largest power of two <= x for finite x > 0 (keeps the sign otherwise; 0,
// Inf and NaN come back unchanged). For normal x this clears the mantissa
// bits, as TransformerEngine does; a subnormal x keeps its leading bit where
// TransformerEngine's mask would give 0 (unreachable for |margin| <= 100).
float round_down_to_power_of_two(float x);

// 1 / scale, one correctly rounded float division (what TransformerEngine
// stores as scale_inv); exact when the scale is a power of two.
constexpr float scale_inverse(float scale) {
  return 1.0f / scale;
}

// The delayed-scaling update: amax_from_history(history, rule), which the
// caller has already MAX-reduced across the tensor-parallel group (with
// amax_combine), then scale_from_amax with previous_scale as the fallback.
float delayed_scaling_update(std::span<const float> amax_history, AmaxHistoryRule rule,
                             ElemType format, int margin, float previous_scale);

// The blockwise recipe's per-block scale: fp8_max / block_amax, 1.0 for an
// all-zero, Inf or NaN block, optionally a power of two.
float blockwise_scale(float block_amax, ElemType format, bool power_of_two,
                      float amax_floor = 0.0f);

}  // namespace fp8c::numerics
