// amax and its reductions, with hand-computed expectations.
#include "codegen/numerics/amax.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

namespace fp8c::numerics {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::uint32_t bits_of(float x) {
  return std::bit_cast<std::uint32_t>(x);
}

TEST(Amax, IsTheLargestMagnitude) {
  EXPECT_EQ(amax(std::vector<float>{1.0f, -3.0f, 2.0f}), 3.0f);
  EXPECT_EQ(amax(std::vector<float>{0x1p-149f, -0x1p-148f}), 0x1p-148f);  // subnormals count
  EXPECT_EQ(amax(std::vector<float>{}), 0.0f);
  EXPECT_EQ(bits_of(amax(std::vector<float>{-0.0f})), 0u);  // +0, not -0
  EXPECT_EQ(amax(std::vector<float>{1.0f, -kInf}), kInf);
}

// A NaN anywhere, of either sign and any payload, gives the canonical NaN
// 0x7FFFFFFF (what max.NaN.f32 returns), never the max of the rest.
TEST(Amax, NanPropagatesAsTheCanonicalNan) {
  const float negative_payload_nan = std::bit_cast<float>(0xFFC0'1234u);
  const std::vector<std::vector<float>> cases = {
      {kNan, 1.0f, 2.0f},           {1.0f, kNan, 2.0f},
      {1.0f, 2.0f, kNan},           {kInf, kNan},
      {negative_payload_nan, 5.0f}, {std::numeric_limits<float>::signaling_NaN()},
  };
  for (const auto& values : cases) EXPECT_EQ(bits_of(amax(values)), kCanonicalNanBits);
}

TEST(Amax, CombineIsOrderIndependent) {
  const float values[] = {0.0f, 1.0f, 7.5f, kInf, kNan};
  for (const float a : values) {
    for (const float b : values) {
      EXPECT_EQ(bits_of(amax_combine(a, b)), bits_of(amax_combine(b, a)));
      for (const float c : values) {
        EXPECT_EQ(bits_of(amax_combine(amax_combine(a, b), c)),
                  bits_of(amax_combine(a, amax_combine(b, c))));
      }
    }
  }
}

// A 3 x 5 matrix in 2 x 2 blocks: a 2 x 3 grid whose right column and bottom
// row of blocks are partial.
TEST(BlockAmax, TilesFromTheTopLeftWithPartialEdgeBlocks) {
  const std::vector<float> matrix = {
      1,  -2, 3,  0,  5,   //
      -4, 1,  0,  -6, 1,   //
      7,  0,  -8, 1,  -9,  //
  };
  EXPECT_EQ(block_amax(matrix, 3, 5, {2, 2}), (std::vector<float>{4, 6, 5, 7, 8, 9}));
  EXPECT_EQ(block_amax(matrix, 3, 5, {1, 128}), (std::vector<float>{5, 6, 9}));       // 1 x 128
  EXPECT_EQ(block_amax(matrix, 3, 5, {32, 1}), (std::vector<float>{7, 2, 8, 6, 9}));  // columnwise
  EXPECT_EQ(block_amax(matrix, 3, 5, {128, 128}), (std::vector<float>{9}));
}

TEST(BlockAmax, NanStaysInItsBlock) {
  const std::vector<float> matrix = {1, kNan, 3, 4};
  const std::vector<float> result = block_amax(matrix, 1, 4, {1, 2});
  EXPECT_EQ(bits_of(result[0]), kCanonicalNanBits);
  EXPECT_EQ(result[1], 4.0f);
}

TEST(BlockAmax, RejectsBadShapes) {
  const std::vector<float> matrix(6, 1.0f);
  EXPECT_THROW(block_amax(matrix, 2, 4, {1, 1}), std::invalid_argument);
  EXPECT_THROW(block_amax(matrix, 2, 3, {0, 1}), std::invalid_argument);
}

TEST(AmaxHistory, MaxOrMostRecent) {
  const std::vector<float> history = {2.0f, 7.0f, 1.0f};  // history[0] is the latest
  EXPECT_EQ(amax_from_history(history, AmaxHistoryRule::max), 7.0f);
  EXPECT_EQ(amax_from_history(history, AmaxHistoryRule::most_recent), 2.0f);
  EXPECT_EQ(amax_from_history({}, AmaxHistoryRule::max), 0.0f);
  // A NaN anywhere in the window makes the window's amax NaN; most_recent
  // only sees it while it is the latest.
  const std::vector<float> with_nan = {2.0f, kNan, 1.0f};
  EXPECT_EQ(bits_of(amax_from_history(with_nan, AmaxHistoryRule::max)), kCanonicalNanBits);
  EXPECT_EQ(amax_from_history(with_nan, AmaxHistoryRule::most_recent), 2.0f);
}

}  // namespace
}  // namespace fp8c::numerics
