// reduce_in_rank_order on its own: the documented order, NaN and signed zero
// rules, integer wrap-around, refusal of FP8.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "collectives/reduce.hpp"

namespace fp8c::collectives::testing {
namespace {

template <typename T>
std::vector<T> reduce(const std::vector<std::vector<T>>& inputs, ElemType dtype, ReduceOp op) {
  std::vector<const void*> pointers;
  for (const auto& input : inputs) pointers.push_back(input.data());
  std::vector<T> out(inputs[0].size());
  reduce_in_rank_order(pointers, out.data(), out.size(), dtype, op);
  return out;
}

TEST(ReduceTest, SumCombinesLeftToRightInRankOrder) {
  // ((1e8 + 1) - 1e8) + 1 = 1 in float32; other orders give 0 or 2.
  const auto out = reduce<float>({{1e8f}, {1.0f}, {-1e8f}, {1.0f}}, ElemType::fp32, ReduceOp::kSum);
  EXPECT_EQ(out[0], 1.0f);
}

TEST(ReduceTest, MaxPropagatesTheFirstNanAndKeepsTheEarliestOfEqualValues) {
  const float nan_a = std::bit_cast<float>(0x7FC00001u);
  const float nan_b = std::bit_cast<float>(0xFFC00002u);
  const auto out = reduce<float>({{1.0f, 0.0f, -0.0f}, {nan_a, -0.0f, 0.0f}, {nan_b, -1.0f, -1.0f}},
                                 ElemType::fp32, ReduceOp::kMax);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[0]), 0x7FC00001u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[1]), 0x00000000u);  // +0 came first
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[2]), 0x80000000u);  // -0 came first
}

TEST(ReduceTest, BFloat16MaxSelectsInputBitsWithoutConverting) {
  const std::vector<std::uint16_t> a = {0x3F80, 0xFF81};  // 1.0, a signalling-looking NaN
  const std::vector<std::uint16_t> b = {0x4000, 0x3F80};  // 2.0, 1.0
  const auto out = reduce<std::uint16_t>({a, b}, ElemType::bf16, ReduceOp::kMax);
  EXPECT_EQ(out[0], 0x4000);
  EXPECT_EQ(out[1], 0xFF81);
}

TEST(ReduceTest, IntegerSumsWrapAround) {
  const auto ints = reduce<std::int32_t>({{std::numeric_limits<std::int32_t>::max()}, {1}},
                                         ElemType::i32, ReduceOp::kSum);
  EXPECT_EQ(ints[0], std::numeric_limits<std::int32_t>::min());
  const auto bytes = reduce<std::uint8_t>({{200}, {100}}, ElemType::u8, ReduceOp::kSum);
  EXPECT_EQ(bytes[0], 44);
  const auto max = reduce<std::int32_t>({{-5}, {-7}}, ElemType::i32, ReduceOp::kMax);
  EXPECT_EQ(max[0], -5);
}

TEST(ReduceTest, SingleInputIsCopiedBitForBit) {
  const auto out = reduce<std::uint16_t>({{0x7D01, 0x0001}}, ElemType::fp16, ReduceOp::kSum);
  EXPECT_EQ(out, (std::vector<std::uint16_t>{0x7D01, 0x0001}));
}

TEST(ReduceTest, OutputMayBeOneOfTheInputs) {
  std::vector<double> a = {1.0, 2.0}, b = {10.0, 20.0};
  const std::vector<const void*> inputs = {a.data(), b.data()};
  reduce_in_rank_order(inputs, b.data(), 2, ElemType::fp64, ReduceOp::kSum);
  EXPECT_EQ(b, (std::vector<double>{11.0, 22.0}));
}

TEST(ReduceTest, Fp8IsRefused) {
  std::uint8_t a = 1, out = 0;
  const std::vector<const void*> inputs = {&a, &a};
  EXPECT_THROW(reduce_in_rank_order(inputs, &out, 1, ElemType::e4m3, ReduceOp::kMax),
               std::invalid_argument);
  // E8M0 scale codes are moved like FP8 data, never reduced.
  EXPECT_THROW(reduce_in_rank_order(inputs, &out, 1, ElemType::e8m0, ReduceOp::kSum),
               std::invalid_argument);
}

}  // namespace
}  // namespace fp8c::collectives::testing
