// segments_to_dim / dim_to_segments: the permute that turns an outermost-dim
// all-gather into a gather along any dim.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "collectives/segments.hpp"

namespace fp8c::collectives::testing {
namespace {

TEST(SegmentsTest, ShapeOfGatheredDim) {
  const std::array<std::size_t, 4> shard = {2, 3, 5, 7};
  const SegmentedShape shape = segmented_shape(shard, 2, 4);
  EXPECT_EQ(shape.world, 4u);
  EXPECT_EQ(shape.outer, 6u);
  EXPECT_EQ(shape.local, 5u);
  EXPECT_EQ(shape.inner, 7u);
  EXPECT_THROW(segmented_shape(shard, 4, 4), std::invalid_argument);
}

// Element by element against the defining formula
// out[o][w * local + l][i] = segments[w][o][l][i].
TEST(SegmentsTest, SegmentsToDimMatchesDefinition) {
  const SegmentedShape shape{3, 4, 2, 5};
  const std::size_t total = shape.world * shape.outer * shape.local * shape.inner;
  std::vector<std::uint16_t> segments(total);
  std::iota(segments.begin(), segments.end(), std::uint16_t{0});
  std::vector<std::uint16_t> out(total);
  segments_to_dim(segments.data(), out.data(), shape, sizeof(std::uint16_t));
  for (std::size_t w = 0; w < shape.world; ++w) {
    for (std::size_t o = 0; o < shape.outer; ++o) {
      for (std::size_t l = 0; l < shape.local; ++l) {
        for (std::size_t i = 0; i < shape.inner; ++i) {
          const std::size_t from = ((w * shape.outer + o) * shape.local + l) * shape.inner + i;
          const std::size_t to =
              (o * shape.world * shape.local + w * shape.local + l) * shape.inner + i;
          ASSERT_EQ(out[to], segments[from]);
        }
      }
    }
  }
  std::vector<std::uint16_t> back(total);
  dim_to_segments(out.data(), back.data(), shape, sizeof(std::uint16_t));
  EXPECT_EQ(back, segments);
}

TEST(SegmentsTest, OutermostDimIsAPlainCopy) {
  const SegmentedShape shape{4, 1, 3, 2};
  std::vector<float> segments(24);
  std::iota(segments.begin(), segments.end(), 0.0f);
  std::vector<float> out(24);
  segments_to_dim(segments.data(), out.data(), shape, sizeof(float));
  EXPECT_EQ(out, segments);
}

}  // namespace
}  // namespace fp8c::collectives::testing
