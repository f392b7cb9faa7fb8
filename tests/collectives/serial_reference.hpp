// Independent serial references for the reductions, written without the
// library's code: float16 through the compiler's _Float16, bfloat16 rounding
// by picking the nearer of the two neighbouring bfloat16 values in double.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace fp8c::collectives::testing {

inline float reference_bf16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// Round to nearest bfloat16, ties to even, by comparing distances.
inline std::uint16_t reference_float_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const auto toward_zero = static_cast<std::uint16_t>(bits >> 16);
  const auto away = static_cast<std::uint16_t>(toward_zero + 1);  // next magnitude up
  if ((bits & 0xFFFFu) == 0) return toward_zero;
  const double exact = value;
  const double low = reference_bf16_to_float(toward_zero);
  // `away` may be infinity's pattern; its distance is then computed from the
  // value 2^128 that the rounding boundary is defined by.
  const double high = (away & 0x7FFFu) == 0x7F80u ? std::copysign(std::ldexp(1.0, 128), exact)
                                                  : double{reference_bf16_to_float(away)};
  const double to_low = std::fabs(exact - low);
  const double to_high = std::fabs(high - exact);
  if (to_low < to_high) return toward_zero;
  if (to_high < to_low) return away;
  return (toward_zero & 1u) == 0 ? toward_zero : away;
}

inline float reference_fp16_to_float(std::uint16_t bits) {
  return static_cast<float>(std::bit_cast<_Float16>(bits));
}

inline std::uint16_t reference_float_to_fp16(float value) {
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(value));
}

// Max with the documented rule: first NaN in rank order, else the largest,
// earliest rank on ties.
template <typename Value>
int reference_max_winner(const std::vector<Value>& per_rank) {
  int winner = 0;
  for (int rank = 1; rank < static_cast<int>(per_rank.size()); ++rank) {
    const Value best = per_rank[static_cast<std::size_t>(winner)];
    const Value candidate = per_rank[static_cast<std::size_t>(rank)];
    if constexpr (std::is_floating_point_v<Value>) {
      if (std::isnan(best)) break;
      if (std::isnan(candidate)) {
        winner = rank;
        continue;
      }
    }
    if (candidate > best) winner = rank;
  }
  return winner;
}

}  // namespace fp8c::collectives::testing
