// Producer -> consumer chains (`input =`) run end to end on CPU ranks: the
// consumer reads the producer's output (FP8 with the consumer's delayed
// scale when chained in FP8), the producer's gradient is the consumer's dX.
#include <gtest/gtest.h>

#include "cpu_test_support.hpp"
#include "runtime/cpu/verify.hpp"

namespace fp8c::cpu {
namespace {

using testing::spec_from;

std::string chain_text(const std::string& recipe1, const std::string& recipe2,
                       const std::string& mode1, const std::string& mode2, bool fp8_output) {
  return "layout tp = {\n  tensor_parallel = 4\n  sequence_parallel = true\n}\n"
         "layer a = linear {\n  in = 256  out = 512  bias = true  activation = gelu\n" +
         std::string(fp8_output ? "  output = fp8\n" : "") + "  recipe = " + recipe1 +
         "\n  layout = tp " + mode1 +
         "\n}\nlayer b = linear {\n  in = 512  out = 256  bias = true\n  input = a\n  recipe = " +
         recipe2 + "\n  layout = tp " + mode2 + "\n}\n";
}

// A row of the chain's own run (checks of the chain end in " [a->b]").
bool has_check(const VerifyReport& r, const std::string& layer, const std::string& check) {
  for (const auto& c : r.checks)
    if (c.layer == layer && c.check == check + " [a->b]") return true;
  return false;
}

TEST(CpuChain, ColumnThenRowChainsMatchOneRankAndFloat64) {
  for (const auto& [r1, r2, fp8] : std::vector<std::tuple<std::string, std::string, bool>>{
           {"delayed { history = 4 }", "delayed { history = 4 }", true},  // FP8 hand-over
           {"current", "current", true},  // output stays bf16: consumer is not delayed
           {"blockwise", "mxfp8", false},
           {"none", "none", false}}) {
    SCOPED_TRACE(r1 + " -> " + r2);
    const Spec spec = spec_from(chain_text(r1, r2, "column", "row", fp8));
    VerifyOptions o;
    o.tokens = 512;
    o.steps = 2;
    const VerifyReport r = verify_spec(spec, o);
    EXPECT_TRUE(r.passed()) << format_report(r);
    EXPECT_TRUE(has_check(r, "b", "y: 4 ranks vs 1 rank"));
    EXPECT_TRUE(has_check(r, "a", "dw: 4 ranks vs float64"));
    EXPECT_TRUE(has_check(r, "a", "dx: 4 ranks vs 1 rank"));
  }
}

// The attention-output -> MLP shape: a row layer reduce-scatters its output
// over tokens, the column layer gathers it (in FP8 when chained).
TEST(CpuChain, RowThenColumnChainsMatchOneRankAndFloat64) {
  for (const std::string recipe : {"delayed { history = 4 }", "blockwise"}) {
    SCOPED_TRACE(recipe);
    const Spec spec = spec_from(chain_text(recipe, recipe, "row", "column", recipe != "blockwise"));
    VerifyOptions o;
    o.tokens = 512;
    const VerifyReport r = verify_spec(spec, o);
    EXPECT_TRUE(r.passed()) << format_report(r);
    EXPECT_TRUE(r.notes.empty());
    EXPECT_TRUE(has_check(r, "a", "dx: 4 ranks vs 1 rank"));
    EXPECT_TRUE(has_check(r, "b", "y: 4 ranks vs 1 rank"));
  }
}

}  // namespace
}  // namespace fp8c::cpu
