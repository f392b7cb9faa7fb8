// The distributed oracle over the whole matrix: every recipe x {column, row}
// x {sequence parallel on, off} x ranks {1, 2, 4, 8}. The N-rank run equals
// the 1-rank run (bitwise where the arithmetic is the same, else within the
// stated tolerance) and both are within the float64 bound.
#include <gtest/gtest.h>

#include "cpu_test_support.hpp"
#include "runtime/cpu/verify.hpp"

namespace fp8c::cpu {
namespace {

using testing::layer_text;
using testing::spec_from;

class CpuMatrix : public ::testing::TestWithParam<testing::MatrixCase> {};

TEST_P(CpuMatrix, NRanksEqualOneRankAndFloat64) {
  const testing::MatrixCase& c = GetParam();
  // Sizes where every scaling block is whole on 8 ranks: out / 8 and
  // tokens / 8 are multiples of 128 for a column layer, in / 8 for a row one.
  const bool column = c.mode == "column";
  const int in = column ? 128 : 1024;
  const int out = column ? 1024 : 128;
  const Spec spec = spec_from(
      layer_text(c.recipe, c.mode, c.sp, c.ranks, in, out, "bias = true  activation = gelu"));
  VerifyOptions o;
  o.tokens = c.sp ? 1024 : 256;
  o.steps = c.recipe.rfind("delayed", 0) == 0 ? 2 : 1;
  const VerifyReport report = verify_spec(spec, o);
  EXPECT_TRUE(report.passed()) << format_report(report);
  if (::testing::Test::HasFailure() || std::getenv("FP8C_PRINT_REPORT"))
    std::cout << format_report(report);
}

INSTANTIATE_TEST_SUITE_P(All, CpuMatrix, ::testing::ValuesIn(testing::matrix_cases()),
                         testing::matrix_case_name);

}  // namespace
}  // namespace fp8c::cpu
