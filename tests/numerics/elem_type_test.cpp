// The one element-type enum (fp8c/elem_type.hpp): names, sizes, the subsets
// and the checks that name a value outside them.
#include "fp8c/elem_type.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "codegen/numerics/scale.hpp"

namespace fp8c {
namespace {

using ::testing::HasSubstr;

struct Expected {
  ElemType type;
  const char* name;
  std::size_t bytes;
  bool fp8;
  bool high_precision;
};

constexpr Expected kAll[] = {
    {ElemType::bf16, "bf16", 2, false, true},  {ElemType::fp16, "fp16", 2, false, true},
    {ElemType::fp32, "fp32", 4, false, true},  {ElemType::e4m3, "e4m3", 1, true, false},
    {ElemType::e5m2, "e5m2", 1, true, false},  {ElemType::e8m0, "e8m0", 1, false, false},
    {ElemType::fp64, "fp64", 8, false, false}, {ElemType::i32, "i32", 4, false, false},
    {ElemType::u8, "u8", 1, false, false},
};

TEST(ElemType, EveryValueHasItsNameSizeAndSubsets) {
  for (const Expected& e : kAll) {
    EXPECT_EQ(to_string(e.type), e.name);
    EXPECT_EQ(element_bytes(e.type), e.bytes) << e.name;
    EXPECT_EQ(is_fp8(e.type), e.fp8) << e.name;
    EXPECT_EQ(is_high_precision(e.type), e.high_precision) << e.name;
    EXPECT_TRUE(is_valid_elem_type(static_cast<std::uint8_t>(e.type))) << e.name;
  }
  EXPECT_FALSE(is_valid_elem_type(static_cast<std::uint8_t>(ElemType::u8) + 1));
  EXPECT_FALSE(is_valid_elem_type(255));
  EXPECT_EQ(to_string(static_cast<ElemType>(200)), "?");
  EXPECT_EQ(element_bytes(static_cast<ElemType>(200)), 0u);
}

TEST(ElemType, SubsetChecksNameTheValue) {
  EXPECT_EQ(require_fp8(ElemType::e5m2, "x"), ElemType::e5m2);
  EXPECT_EQ(require_high_precision(ElemType::fp16, "x"), ElemType::fp16);
  try {
    require_fp8(ElemType::bf16, "quantize kernel format");
    ADD_FAILURE() << "bf16 accepted as an FP8 format";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "quantize kernel format: bf16 is not an FP8 format (e4m3 or e5m2)");
  }
  try {
    require_high_precision(ElemType::e4m3, "layer 'fc1' dtype");
    ADD_FAILURE() << "e4m3 accepted as a high-precision type";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "layer 'fc1' dtype: e4m3 is not a high-precision type (bf16, fp16 or fp32)");
  }
  EXPECT_THROW(require_fp8(ElemType::e8m0, "x"), std::invalid_argument);
  EXPECT_THROW(require_high_precision(ElemType::fp64, "x"), std::invalid_argument);
}

TEST(ElemType, ScaleMathTakesOnlyFp8Formats) {
  EXPECT_EQ(numerics::scale_from_amax(1.0f, ElemType::e4m3, 1.0f), 448.0f);
  try {
    numerics::scale_from_amax(1.0f, ElemType::fp32, 1.0f);
    ADD_FAILURE() << "fp32 accepted as an FP8 format";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("fp32 is not an FP8 format"));
  }
  EXPECT_THROW(numerics::blockwise_scale(1.0f, ElemType::bf16, false), std::invalid_argument);
}

}  // namespace
}  // namespace fp8c
