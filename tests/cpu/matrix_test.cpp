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

struct Case {
  std::string recipe;
  std::string mode;
  bool sp;
  int ranks;
};

// Readable test names in ctest's listing instead of the Case's bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.recipe << " " << c.mode << (c.sp ? " sp" : "") << " ranks " << c.ranks;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string r = info.param.recipe.substr(0, info.param.recipe.find(' '));
  return r + "_" + info.param.mode + (info.param.sp ? "_sp" : "") + "_" +
         std::to_string(info.param.ranks);
}

class CpuMatrix : public ::testing::TestWithParam<Case> {};

TEST_P(CpuMatrix, NRanksEqualOneRankAndFloat64) {
  const Case& c = GetParam();
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

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (std::string recipe : {"delayed { history = 4 }", "current", "blockwise", "mxfp8", "none"})
    for (std::string mode : {"column", "row"})
      for (bool sp : {false, true})
        for (int ranks : {1, 2, 4, 8}) {
          if (ranks == 1 && sp) continue;  // one rank: sequence parallelism is a no-op
          cases.push_back({recipe, mode, sp, ranks});
        }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, CpuMatrix, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace fp8c::cpu
