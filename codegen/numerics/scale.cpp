#include "codegen/numerics/scale.hpp"

#include <bit>
#include <cmath>
#include <limits>

namespace fp8c::numerics {

float scale_from_amax(float amax, ElemType format, float fallback, ScaleRule rule) {
  require_fp8(format, "scale_from_amax");
  if (amax < rule.amax_floor) amax = rule.amax_floor;
  if (!std::isfinite(amax) || !(amax > 0.0f)) return fallback;
  const float scaled_max = std::ldexp(fp8_max(format), -rule.margin);
  float scale = scaled_max / amax;
  if (std::isinf(scale)) scale = std::numeric_limits<float>::max();
  return rule.power_of_two ? round_down_to_power_of_two(scale) : scale;
}

float round_down_to_power_of_two(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t exponent_field = bits & 0x7F80'0000u;
  if (exponent_field == 0x7F80'0000u) return x;  // Inf, NaN
  if (exponent_field != 0) return std::bit_cast<float>(bits & 0xFF80'0000u);
  // Zero or subnormal: the leading fraction bit is the power of two.
  return std::bit_cast<float>((bits & 0x8000'0000u) | std::bit_floor(bits & 0x007F'FFFFu));
}

float delayed_scaling_update(std::span<const float> amax_history, AmaxHistoryRule rule,
                             ElemType format, int margin, float previous_scale) {
  return scale_from_amax(amax_from_history(amax_history, rule), format, previous_scale,
                         ScaleRule{.margin = margin});
}

float blockwise_scale(float block_amax, ElemType format, bool power_of_two, float amax_floor) {
  return scale_from_amax(block_amax, format, 1.0f,
                         ScaleRule{.power_of_two = power_of_two, .amax_floor = amax_floor});
}

}  // namespace fp8c::numerics
