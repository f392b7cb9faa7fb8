// Inputs too big or too binary to commit, generated here: whatever the bytes,
// the front end reports an error with a position (through the library and
// through `fp8c check`, exit 1), never crashes, and finishes quickly. The
// report stays small however large the input.

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <regex>

#include "fp8c/dsl.hpp"
#include "tests/dsl/support.hpp"

namespace fp8c::test {
namespace {

// Generous bounds: each of these takes milliseconds, but CI machines are slow.
constexpr double kLibrarySeconds = 5;
constexpr double kCommandSeconds = 10;
// A report is a few diagnostics of a few lines each, whatever the input size.
constexpr std::size_t kMaxReportBytes = 8 * 1024;

struct Hostile {
  std::string name;
  std::string text;
  // The first diagnostic, exactly: "LINE:COL: error: MESSAGE".
  std::string first;
};

std::string repeat(std::string_view s, std::size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}

std::string random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng() & 0xFF);
  return out;
}

// Random text from the language's own alphabet (names, numbers, '=', braces,
// comments, newlines) with braces kept shallow, so that it gets past the
// byte checks and exercises the grammar and its error recovery.
std::string token_soup(std::size_t n, std::uint32_t seed) {
  static const char* const kTokens[] = {"layer", "recipe", "layout", "in",  "out",    "=",
                                        "=",     "{",      "}",      "fc1", "64",     "1.5",
                                        "\n",    "\n",     "# c\n",  "-3",  "linear", "target"};
  std::mt19937 rng(seed);
  std::string out;
  int depth = 0;
  while (out.size() < n) {
    std::string_view token = kTokens[rng() % std::size(kTokens)];
    if (token == "{" && depth >= 3) token = "}";
    if (token == "{") ++depth;
    if (token == "}") --depth;
    if (depth < 0) {
      depth = 0;
      continue;
    }
    out += token;
    out += ' ';
  }
  return out;
}

std::vector<Hostile> hostile_inputs() {
  const std::string nest = "layer fc1 = linear " + repeat("{", 100000) + repeat("}", 100000);
  const std::string ten_mb = std::string(10u << 20, 'x');
  return {
      {"nested_braces_100000", nest + "\n", "1:52: error: blocks nested deeper than 32 levels"},
      {"nested_entries_100000", "layer fc1 = linear " + repeat("{ a = ", 100000) + "\n",
       "1:212: error: blocks nested deeper than 32 levels"},
      {"ten_mb_word_in_block", "layer fc1 = linear { in = 64 out = 64 " + ten_mb + " }\n",
       "1:39: error: unexpected 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxx...': 'out' takes one value"},
      {"ten_mb_number",
       "layer fc1 = linear { in = " + std::string(10u << 20, '9') + " out = 64 }\n",
       "1:27: error: in = 99999999999999999999999999999... is too large (at most 2147483647)"},
      {"ten_mb_name_without_equals", ten_mb,
       "1:10485761: error: expected '=' before the end of the file"},
      {"ten_mb_layer_name", "layer " + ten_mb + " = linear { in = 64 }\n",
       "1:7: error: layer '" + std::string(990, 'x') + "..."},
      {"ten_mb_comment", "# " + ten_mb + "\n",
       "1:1: error: the file declares no layers: a spec needs at least one `layer NAME = linear "
       "{ ... }`"},
      {"nul_byte", std::string("layer fc1 = linear { in = 64 out = 64 }\n\0\n", 42),
       "2:1: error: NUL byte in the file (is it a binary file?)"},
      {"invalid_utf8", "layer fc1 = linear { in = 64 out = 64 } # \xC3\x28\n",
       "1:43: error: invalid UTF-8 (byte 0xC3)"},
      {"empty_file", "",
       "1:1: error: the file declares no layers: a spec needs at least one `layer NAME = linear "
       "{ ... }`"},
      {"integer_past_2_64", "layer fc1 = linear { in = 18446744073709551616 out = 64 }\n",
       "1:27: error: in = 18446744073709551616 is too large (at most 2147483647)"},
      {"integer_2_64_minus_1", "layer fc1 = linear { in = 18446744073709551615 out = 64 }\n",
       "1:27: error: in = 18446744073709551615 is too large (at most 2147483647)"},
      {"integer_100_digits", "layer fc1 = linear { in = 64 out = " + std::string(100, '7') + " }\n",
       "1:36: error: out = 77777777777777777777777777777... is too large (at most 2147483647)"},
      {"random_bytes_1mb", random_bytes(1u << 20, 20240601), ""},
      {"token_soup_1mb", token_soup(1u << 20, 7), ""},
      {"many_syntax_errors", repeat("layer a = linear { in 64 }\n", 200000),
       "1:23: error: expected '='"},
  };
}

void PrintTo(const Hostile& input, std::ostream* out) {
  *out << input.name << " (" << input.text.size() << " bytes)";
}

class HostileTest : public ::testing::TestWithParam<Hostile> {};

TEST_P(HostileTest, LibraryReportsAPositionedErrorQuickly) {
  const Hostile& input = GetParam();
  const SourceFile file(input.name + ".fp8", input.text);
  const auto start = std::chrono::steady_clock::now();
  const CheckResult result = check_source(file);
  const std::string rendered = result.diagnostics.render(file);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, kLibrarySeconds);
  EXPECT_FALSE(result.spec);
  ASSERT_TRUE(result.diagnostics.has_errors());
  ASSERT_FALSE(result.diagnostics.all().empty());
  const Diagnostic& first = result.diagnostics.all().front();
  EXPECT_EQ(first.severity, Severity::error);
  EXPECT_LE(first.where.end, input.text.size());
  if (!input.first.empty()) {
    EXPECT_EQ(describe(file, first), input.first);
  }
  EXPECT_LT(rendered.size(), kMaxReportBytes) << rendered.substr(0, 2000);
  // Every rendered header carries a position.
  const std::regex header("^" + input.name + R"(\.fp8:[0-9]+:[0-9]+: (error|warning|note): .+$)");
  const std::vector<std::string> lines = split_lines(rendered);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_TRUE(std::regex_match(lines[0], header)) << lines[0];
}

TEST_P(HostileTest, CommandExitsOneWithAPositionedError) {
  const Hostile& input = GetParam();
  const std::string path = scratch_dir("hostile_" + input.name) + "/input.fp8";
  write_file(path, input.text);
  const CommandResult run = run_fp8c({"check", path}, 60);
  ASSERT_FALSE(run.timed_out);
  EXPECT_LT(run.seconds, kCommandSeconds);
  EXPECT_EQ(run.status, 1) << run.err.substr(0, 2000);
  EXPECT_EQ(run.out, "");
  EXPECT_LT(run.err.size(), kMaxReportBytes) << run.err.substr(0, 2000);
  const std::vector<std::string> lines = split_lines(run.err);
  ASSERT_GE(lines.size(), 3u) << run.err;
  if (!input.first.empty()) {
    EXPECT_EQ(lines[0], path + ":" + input.first);
  } else {
    EXPECT_EQ(lines[0].rfind(path + ":", 0), 0u) << lines[0];
    EXPECT_NE(lines[0].find(": error: "), std::string::npos) << lines[0];
  }
  // What the terminal gets is text: no control bytes, whatever the input.
  for (char c : run.err)
    ASSERT_FALSE((static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') || c == 0x7F)
        << "control byte " << static_cast<int>(static_cast<unsigned char>(c)) << " on stderr";
}

INSTANTIATE_TEST_SUITE_P(Generated, HostileTest, ::testing::ValuesIn(hostile_inputs()),
                         [](const auto& info) { return info.param.name; });

// Past the error limit the rest is counted, even for syntax errors.
TEST(HostileInputs, ManySyntaxErrorsAreCounted) {
  const std::string text = repeat("layer a = linear { in 64 }\n", 200000);
  const SourceFile file("many.fp8", text);
  const CheckResult result = check_source(file);
  EXPECT_EQ(result.diagnostics.error_count(), 200000u);
  EXPECT_EQ(result.diagnostics.all().size(), Diagnostics::kMaxErrors);
  const std::string rendered = result.diagnostics.render(file);
  EXPECT_NE(rendered.find("many.fp8: 199980 more errors not shown (limit 20)\n"),
            std::string::npos);
}

}  // namespace
}  // namespace fp8c::test
