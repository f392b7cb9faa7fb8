#pragma once
// amax, the max of |x| over a scaling group, and its reductions (over blocks,
// over the delayed-scaling history, across ranks).
//
// NaN rule, the same at every level: a NaN anywhere makes the amax NaN, the
// canonical +NaN 0x7FFFFFFF that PTX max.NaN.f32 returns, so a kernel using
// max.NaN.f32 (and NCCL/gloo reducing with this rule) matches bit for bit.
// A NaN amax must be visible: a tensor with a NaN in it is broken, and the
// scale helpers in scale.hpp answer a NaN amax by keeping the previous scale
// rather than deriving a scale from the non-NaN rest.
// This deliberately differs from TransformerEngine, whose kernels reduce with
// fmaxf and therefore silently ignore NaNs (fmaxf(NaN, x) == x).
//
// +-Inf gives +Inf; -0.0 counts as +0.0; an empty group has amax 0.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace fp8c::numerics {

inline constexpr std::uint32_t kCanonicalNanBits = 0x7FFF'FFFFu;

// The reduction operator for amaxes (or any non-negative values): max, but
// NaN wins. Associative and commutative, so any reduction order (threads,
// warps, ranks) gives the same bits.
constexpr float amax_combine(float a, float b) {
  if (a != a || b != b) return std::bit_cast<float>(kCanonicalNanBits);
  return a < b ? b : a;
}

// |x| by clearing the sign bit: exact, and -0.0 becomes +0.0.
constexpr float magnitude(float x) {
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) & 0x7FFF'FFFFu);
}

// max |x_i| over the span (0 when empty).
float amax(std::span<const float> values);

// Per-block amax of a row-major rows x cols matrix tiled by blocks of
// block_rows x block_cols from the top-left; blocks at the right and bottom
// edges may be partial and are reduced over the elements they do have.
// The result is row-major over the ceil(rows / block_rows) x
// ceil(cols / block_cols) grid of blocks. 1 x 128 and 128 x 128 are the
// blockwise recipe's tiles, 1 x 32 (rowwise) and 32 x 1 (columnwise) MX's.
struct BlockShape {
  std::size_t rows;
  std::size_t cols;
};
std::vector<float> block_amax(std::span<const float> matrix, std::size_t rows, std::size_t cols,
                              BlockShape block);

// How delayed scaling turns its amax history into the amax it uses.
enum class AmaxHistoryRule : std::uint8_t {
  max,          // amax_combine over the whole window
  most_recent,  // history[0]
};

// history[0] is the most recent amax (TransformerEngine's convention). An
// empty history gives 0, which the scale helpers answer with the fallback.
float amax_from_history(std::span<const float> history, AmaxHistoryRule rule);

}  // namespace fp8c::numerics
