// fmt and explain keep their promises: fmt is idempotent and never changes
// what a file means (the formatted text checks to an equal Spec, every
// comment survives), and explain's output checks to an equal Spec. For every
// example and for hand-written messy inputs; through the library and the
// binary.

#include <gtest/gtest.h>

#include "fp8c/dsl.hpp"
#include "tests/dsl/support.hpp"

namespace fp8c::test {
namespace {

struct Input {
  std::string name;
  std::string text;
};

void PrintTo(const Input& input, std::ostream* out) {
  *out << input.name;
}

// Valid files written the way people write them in a hurry.
std::vector<Input> messy_inputs() {
  return {
      {"comments_in_odd_places",
       "# leading\n"
       "recipe   hybrid=delayed{forward=e4m3 # after forward\n"
       "backward=e5m2\n"
       "  # own line inside\n"
       "\n"
       "  history = 16 amax = most_recent}   # after close\n"
       "layout tp2 = {   # after brace\n"
       "  tensor_parallel = 2 }\n"
       "target=sm_90a # t\n"
       "layer fc1 = linear { in = 64 out = 128 recipe = hybrid layout = tp2 column output = fp8 "
       "debug = { stats = true fallback = wgrad } }\n"
       "layer fc2 = linear {\n"
       "  input = fc1 out = 64\n"
       "  recipe = current {\n"
       "    # comment in a nested block\n"
       "    forward = e4m3 }\n"
       "  layout = tp2 # inside a value\n"
       "    row\n"
       "}\n"
       "# trailing comment 1\n"
       "\n"
       "# trailing comment 2\n"},
      {"all_on_one_line",
       "recipe r = current layout l = { tensor_parallel = 2 } layer a = linear { in = 64 out = 64 "
       "recipe = r layout = l column } layer b = linear { input = a out = 64 recipe = r layout = l "
       "row } target = sm_90a"},
      {"crlf_and_tabs",
       "recipe\tr =\tcurrent { scale = pow2 }\r\n\r\n"
       "layer a = linear {\r\n\tin\t= 64\r\n\tout\t= 64   # tabbed\r\n\trecipe\t= r\r\n}\r\n"},
      {"consumer_first_blank_lines",
       "\n\n\nlayer down = linear {\n  input = up\n\n\n  out = 1024\n  recipe = current\n"
       "  layout = tp { overlap = ring } row\n}\n\n\n\n"
       "# the projection up\n\n"
       "layer up = linear { in = 1024 out = 4096 recipe = current\n"
       "  layout = tp { overlap = ring } column }\n"
       "layout tp = { tensor_parallel = 4 sequence_parallel = true }\n"},
      {"target_after_a_word_and_layer_named_target",
       "recipe r = delayed\ntarget = sm_89\nlayer target = linear { in = 64 out = 64 recipe = r "
       "}\n"},
      {"long_inline_blocks_and_refinements",
       "recipe hybrid = delayed { history = 16 }\n"
       "recipe strict = hybrid { nan = error }\n"
       "debug inspect = { stats = true fallback = fprop dgrad wgrad }\n"
       "layer fc1 = linear { in = 64 out = 64 recipe = strict { margin = 1 amax = most_recent "
       "forward = e5m2 backward = e5m2 } layout = { tensor_parallel = 2 sequence_parallel = true "
       "overlap = bulk } row debug = inspect { stats = false } }\n"},
      {"no_newline_after_a_comment_at_the_end",
       "layer a = linear { in = 64 out = 64 }  # the end, without a newline"},
      {"empty_blocks",
       "layout single = { }\ndebug quiet = { }\nrecipe plain = current { }\n"
       "layer a = linear { in = 64 out = 64 recipe = plain { } layout = single { } debug = quiet "
       "{ } }\n"},
  };
}

std::vector<Input> all_inputs() {
  std::vector<Input> inputs;
  for (const auto& path : list_files(examples_dir(), ".fp8"))
    inputs.push_back({"example_" + stem(path), read_file(path)});
  for (auto& input : messy_inputs()) inputs.push_back(std::move(input));
  for (auto& input : inputs)
    for (char& c : input.name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return inputs;
}

// The comments of a text in order, trailing spaces dropped.
std::vector<std::string> comments(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t i = text.find('#'); i != std::string::npos; i = text.find('#', i)) {
    std::size_t end = text.find('\n', i);
    if (end == std::string::npos) end = text.size();
    std::string c = text.substr(i, end - i);
    while (!c.empty() && std::isspace(static_cast<unsigned char>(c.back()))) c.pop_back();
    out.push_back(c);
    i = end;
  }
  return out;
}

class RoundTripTest : public ::testing::TestWithParam<Input> {
 protected:
  std::string format(const std::string& text) {
    const SourceFile file(GetParam().name + ".fp8", text);
    Diagnostics diagnostics;
    const auto formatted = format_source(file, diagnostics);
    EXPECT_TRUE(formatted) << diagnostics.render(file);
    EXPECT_FALSE(diagnostics.has_errors());
    return formatted.value_or("");
  }
  std::optional<Spec> check(const std::string& text) {
    const SourceFile file(GetParam().name + ".fp8", text);
    CheckResult result = check_source(file);
    EXPECT_TRUE(result.spec) << result.diagnostics.render(file) << "\n--- text ---\n" << text;
    return std::move(result.spec);
  }
};

TEST_P(RoundTripTest, FormatIsIdempotent) {
  const std::string once = format(GetParam().text);
  EXPECT_EQ(format(once), once);
}

TEST_P(RoundTripTest, FormattedTextChecksToTheSameSpec) {
  const auto original = check(GetParam().text);
  const auto formatted = check(format(GetParam().text));
  ASSERT_TRUE(original && formatted);
  EXPECT_EQ(*formatted, *original);
}

TEST_P(RoundTripTest, FormatKeepsEveryComment) {
  EXPECT_EQ(comments(format(GetParam().text)), comments(GetParam().text));
}

TEST_P(RoundTripTest, FormattedTextIsCanonical) {
  const std::string once = format(GetParam().text);
  // One declaration after another, separated by one blank line at most,
  // indented by two spaces a level, no trailing spaces, a final newline.
  EXPECT_EQ(once.find("\n\n\n"), std::string::npos) << once;
  EXPECT_EQ(once.find(" \n"), std::string::npos) << once;
  EXPECT_EQ(once.find('\t'), std::string::npos) << once;
  EXPECT_EQ(once.find('\r'), std::string::npos) << once;
  ASSERT_FALSE(once.empty());
  EXPECT_EQ(once.back(), '\n');
  for (const auto& line : split_lines(once)) {
    const std::size_t indent = line.find_first_not_of(' ');
    if (indent != std::string::npos) {
      EXPECT_EQ(indent % 2, 0u) << line;
    }
  }
}

TEST_P(RoundTripTest, ExplainChecksToTheSameSpec) {
  const auto original = check(GetParam().text);
  ASSERT_TRUE(original);
  const std::string explained = explain_spec(*original);
  const auto again = check(explained);
  ASSERT_TRUE(again) << explained;
  EXPECT_EQ(*again, *original) << explained;
  // And explain's own output is stable.
  EXPECT_EQ(explain_spec(*again), explained);
}

TEST_P(RoundTripTest, TheCommandsAgreeWithTheLibrary) {
  const std::string dir = scratch_dir("roundtrip_" + GetParam().name);
  const std::string path = dir + "/input.fp8";
  write_file(path, GetParam().text);

  const CommandResult fmt = run_fp8c({"fmt", path});
  EXPECT_EQ(fmt.status, 0) << fmt.err;
  EXPECT_EQ(fmt.err, "");
  EXPECT_EQ(fmt.out, format(GetParam().text));

  const CommandResult explain = run_fp8c({"explain", path});
  EXPECT_EQ(explain.status, 0) << explain.err;
  const auto spec = check(GetParam().text);
  ASSERT_TRUE(spec);
  EXPECT_EQ(explain.out, explain_spec(*spec));

  // --check fails on the original unless it is already formatted, and passes
  // once --write has rewritten it.
  const bool was_formatted = fmt.out == GetParam().text;
  const CommandResult check_before = run_fp8c({"fmt", "--check", path});
  EXPECT_EQ(check_before.status, was_formatted ? 0 : 1) << check_before.err;
  EXPECT_EQ(check_before.out, "");
  const CommandResult write = run_fp8c({"fmt", "--write", path});
  EXPECT_EQ(write.status, 0) << write.err;
  EXPECT_EQ(write.out, "");
  EXPECT_EQ(read_file(path), fmt.out);
  EXPECT_EQ(run_fp8c({"fmt", "--check", path}).status, 0);
}

INSTANTIATE_TEST_SUITE_P(Inputs, RoundTripTest, ::testing::ValuesIn(all_inputs()),
                         [](const auto& info) { return info.param.name; });

// fmt's layout, exactly: alignment in runs, short flat blocks on one line,
// comments where they were, single blank lines kept.
TEST(Format, CanonicalLayout) {
  const std::string messy =
      "# spec\n"
      "layout tp2={tensor_parallel=2   # two ranks\n"
      "sequence_parallel=true}\n"
      "layer fc1=linear{in=64 out=128\n"
      "\n"
      "\n"
      "  recipe=current{forward=e4m3 backward=e5m2}  # inline\n"
      "  # the layout\n"
      "  layout=tp2 column\n"
      "  debug = { stats = true fallback = fprop dgrad wgrad }\n"
      "}\n";
  const std::string expected =
      "# spec\n"
      "layout tp2 = {\n"
      "  tensor_parallel   = 2  # two ranks\n"
      "  sequence_parallel = true\n"
      "}\n"
      "\n"
      "layer fc1 = linear {\n"
      "  in  = 64\n"
      "  out = 128\n"
      "\n"
      "  recipe = current { forward = e4m3  backward = e5m2 }  # inline\n"
      "  # the layout\n"
      "  layout = tp2 column\n"
      "  debug  = { stats = true  fallback = fprop dgrad wgrad }\n"
      "}\n";
  const SourceFile file("messy.fp8", messy);
  Diagnostics diagnostics;
  const auto formatted = format_source(file, diagnostics);
  ASSERT_TRUE(formatted) << diagnostics.render(file);
  EXPECT_EQ(*formatted, expected);
}

TEST(Format, ATrailingCommentAfterAnOpeningBraceStaysThere) {
  const SourceFile file("brace.fp8",
                        "layer a = linear {  # the first layer\n  in  = 64\n  out = 64\n}\n");
  Diagnostics diagnostics;
  const auto formatted = format_source(file, diagnostics);
  ASSERT_TRUE(formatted);
  EXPECT_EQ(*formatted, file.text());
}

TEST(Format, AnEmptyFileFormatsToNothing) {
  const SourceFile file("empty.fp8", "");
  Diagnostics diagnostics;
  EXPECT_EQ(format_source(file, diagnostics), std::string());
  const SourceFile comments_only("c.fp8", "# a\n\n# b\n");
  EXPECT_EQ(format_source(comments_only, diagnostics), std::string("# a\n# b\n"));
}

TEST(Format, ATextThatDoesNotParseIsNotFormatted) {
  const SourceFile file("bad.fp8", "layer a = linear { in 64 }\n");
  Diagnostics diagnostics;
  EXPECT_FALSE(format_source(file, diagnostics));
  EXPECT_EQ(describe_all(file, diagnostics), std::vector<std::string>{"1:23: error: expected '='"});

  const std::string path = scratch_dir("fmt_bad") + "/bad.fp8";
  write_file(path, file.text());
  const CommandResult run = run_fp8c({"fmt", "--write", path});
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err.rfind(path + ":1:23: error: expected '='\n", 0), 0u) << run.err;
  EXPECT_EQ(read_file(path), file.text());  // left as it was
}

// The semantic errors of a file survive formatting: fmt works on syntax only.
TEST(Format, ASemanticallyWrongFileStillFormats) {
  const SourceFile file("wrong.fp8", "layer a = linear {in=64 out=0}\n");
  Diagnostics diagnostics;
  const auto formatted = format_source(file, diagnostics);
  ASSERT_TRUE(formatted);
  EXPECT_EQ(*formatted, "layer a = linear {\n  in  = 64\n  out = 0\n}\n");
}

}  // namespace
}  // namespace fp8c::test
