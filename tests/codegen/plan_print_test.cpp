// The printed forms of a plan: the text names tensors, layouts and bytes; the
// JSON is well formed.
#include <gtest/gtest.h>

#include "codegen/plan/plan_print.hpp"
#include "codegen/plan/planner.hpp"
#include "tests/codegen/plan_test_support.hpp"

namespace fp8c {
namespace {

// A minimal JSON syntax check (strings, brackets, commas), enough to catch
// an emitter that forgets a comma or a quote.
bool well_formed_json(const std::string& s) {
  std::string stack;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      else if (static_cast<unsigned char>(c) < 0x20)
        return false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[')
      stack.push_back(c);
    else if (c == '}' || c == ']') {
      if (stack.empty() || stack.back() != (c == '}' ? '{' : '[')) return false;
      stack.pop_back();
    }
  }
  return stack.empty() && !in_string && s.find(",]") == std::string::npos &&
         s.find(",}") == std::string::npos;
}

TEST(PlanPrint, TextShowsLayoutsCollectivesAndBytes) {
  const std::string text = print_plan(plan_spec(testing::example("gpt_mlp.fp8")));
  EXPECT_NE(text.find("layer fc1 (8 ranks)"), std::string::npos);
  EXPECT_NE(text.find("all_gather along 'tokens', 58720256 bytes/rank"), std::string::npos);
  EXPECT_NE(text.find("fc1.x.fp8.col.gathered e4m3 [tokens 8192, in 8192] columnwise per_tensor "
                      "segmented(tokens)"),
            std::string::npos);
  EXPECT_NE(text.find("buffers per rank"), std::string::npos);
}

TEST(PlanPrint, JsonIsWellFormedForEveryExample) {
  for (const auto& file : testing::example_files()) {
    const std::string json = plan_to_json(plan_spec(testing::example(file)));
    EXPECT_TRUE(well_formed_json(json)) << file;
    EXPECT_NE(json.find("\"layers\""), std::string::npos);
  }
}

}  // namespace
}  // namespace fp8c
