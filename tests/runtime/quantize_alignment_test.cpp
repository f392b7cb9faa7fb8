// The quantize launcher's alignment rule, on the host (no GPU): vector tiles
// need aligned pointers, and a misaligned one is named before any launch.
#include <gtest/gtest.h>

#include "runtime/quantize_launcher.hpp"

namespace fp8c::runtime {
namespace {

QuantizeArgs aligned_args(int rows, int cols) {
  QuantizeArgs a;
  a.x = 0x10000;
  a.pre_activation = 0x20000;
  a.scale = 0x30000;
  a.rowwise = 0x40000;
  a.columnwise = 0x50000;
  a.amax_out = 0x60000;
  a.rows = rows;
  a.cols = cols;
  return a;
}

TEST(QuantizeAlignment, VectorTilesNameTheMisalignedPointer) {
  QuantizeKernel k;
  k.columnwise = true;
  k.dact = Activation::relu;
  EXPECT_FALSE(quantize_alignment_problem(k, aligned_args(256, 256)));
  const auto expect = [&](QuantizeArgs a, const std::string& words) {
    const auto problem = quantize_alignment_problem(k, a);
    ASSERT_TRUE(problem) << words;
    EXPECT_NE(problem->find(words), std::string::npos) << *problem;
    EXPECT_NE(problem->find(k.name()), std::string::npos) << *problem;
  };
  QuantizeArgs a = aligned_args(256, 256);
  a.x += 8;
  expect(a, "x must be 16-byte aligned");
  a = aligned_args(256, 256);
  a.pre_activation += 2;
  expect(a, "pre_activation must be 16-byte aligned");
  a = aligned_args(256, 256);
  a.rowwise += 4;
  expect(a, "rowwise must be 8-byte aligned");
  a = aligned_args(256, 256);
  a.columnwise += 2;
  expect(a, "columnwise must be 4-byte aligned");
}

TEST(QuantizeAlignment, ElementWiseShapesTakeAnyPointer) {
  QuantizeKernel k;
  k.columnwise = true;
  QuantizeArgs a = aligned_args(256, 260);  // cols % 8 != 0: no vector tile
  a.x += 2;
  a.rowwise += 1;
  EXPECT_FALSE(quantize_alignment_problem(k, a));
  a = aligned_args(100, 256);  // below one tile
  a.x += 2;
  EXPECT_FALSE(quantize_alignment_problem(k, a));
  a = aligned_args(258, 256);  // rows % 4 != 0 with columnwise output
  a.x += 2;
  EXPECT_FALSE(quantize_alignment_problem(k, a));
  k.columnwise = false;  // rowwise only: rows % 4 does not matter
  EXPECT_TRUE(quantize_alignment_problem(k, a));
}

}  // namespace
}  // namespace fp8c::runtime
