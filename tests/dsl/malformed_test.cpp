// Every file in tests/malformed/ through the library and through the real
// `fp8c check`: exactly the diagnostics its `# expect:` lines list, rendered as
// `file:line:col: severity: message`, the source line and a caret. The header
// format is described in tests/malformed/README.md.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>

#include "fp8c/dsl.hpp"
#include "tests/dsl/support.hpp"

namespace fp8c::test {
namespace {

std::vector<std::string> expectation_strings(const MalformedFile& file) {
  std::vector<std::string> out;
  for (const auto& e : file.expectations) out.push_back(e.str());
  return out;
}

CheckOptions options_for(const MalformedFile& file) {
  CheckOptions options;
  if (file.arch) options.target = parse_target(*file.arch);
  return options;
}

class MalformedTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    file_ = load_malformed(GetParam());
    ASSERT_TRUE(file_.header_problems.empty())
        << GetParam() << ":\n  " << ::testing::PrintToString(file_.header_problems);
    if (file_.arch) {
      ASSERT_TRUE(parse_target(*file_.arch)) << "unknown # arch: " << *file_.arch;
    }
  }
  MalformedFile file_;
};

TEST_P(MalformedTest, LibraryReportsExactlyTheExpectedDiagnostics) {
  const SourceFile source(file_.path, file_.text);
  const CheckResult result = check_source(source, options_for(file_));
  EXPECT_EQ(describe_all(source, result.diagnostics), expectation_strings(file_))
      << "rendered:\n"
      << result.diagnostics.render(source);
  EXPECT_EQ(result.spec.has_value(), !file_.expects_errors());
  EXPECT_EQ(result.diagnostics.has_errors(), file_.expects_errors());
  for (const auto& d : result.diagnostics.all()) {
    EXPECT_LE(d.where.begin, d.where.end) << d.message;
    EXPECT_LE(d.where.end, file_.text.size()) << d.message;
  }
}

TEST_P(MalformedTest, CommandPrintsEachDiagnosticWithLineAndCaret) {
  std::vector<std::string> args{"check"};
  if (file_.arch) args.insert(args.end(), {"--arch", *file_.arch});
  args.push_back(file_.path);
  const CommandResult run = run_fp8c(args);
  ASSERT_FALSE(run.timed_out);
  EXPECT_EQ(run.status, file_.expects_errors() ? 1 : 0) << run.err;
  EXPECT_EQ(run.out, "");

  const SourceFile source(file_.path, file_.text);
  const std::vector<std::string> lines = split_lines(run.err);
  std::size_t at = 0;
  for (const auto& expected : file_.expectations) {
    const std::string problem = check_rendering(lines, at, file_.path, source, expected);
    ASSERT_EQ(problem, "") << "stderr:\n" << run.err;
    at += 3;
  }
  EXPECT_EQ(at, lines.size()) << "more on stderr than expected:\n" << run.err;
}

// The files with warnings only: they check (exit 0), but not under --werror.
class WarningsOnlyTest : public MalformedTest {};

TEST_P(WarningsOnlyTest, FailUnderWerror) {
  ASSERT_TRUE(!file_.expects_errors() && file_.expects_warnings());
  std::vector<std::string> args{"check", "--werror"};
  if (file_.arch) args.insert(args.end(), {"--arch", *file_.arch});
  args.push_back(file_.path);
  const CommandResult run = run_fp8c(args);
  EXPECT_EQ(run.status, 1) << run.err;
  EXPECT_NE(run.err.find(": warning: "), std::string::npos) << run.err;
}

// fmt reports the same syntax errors as check; a file that parses formats
// idempotently, and its formatted text produces the same messages.
TEST_P(MalformedTest, FormatKeepsWhatTheFileMeans) {
  const SourceFile source(file_.path, file_.text);
  const CheckResult checked = check_source(source, options_for(file_));
  Diagnostics format_diagnostics;
  const auto formatted = format_source(source, format_diagnostics);
  if (!formatted) {
    EXPECT_TRUE(format_diagnostics.has_errors());
    EXPECT_EQ(describe_all(source, format_diagnostics), describe_all(source, checked.diagnostics));
    return;
  }
  EXPECT_FALSE(format_diagnostics.has_errors());
  const SourceFile formatted_file(file_.path, *formatted);
  Diagnostics again_diagnostics;
  const auto again = format_source(formatted_file, again_diagnostics);
  ASSERT_TRUE(again) << again_diagnostics.render(formatted_file);
  EXPECT_EQ(*again, *formatted);
  const CheckResult rechecked = check_source(formatted_file, options_for(file_));
  EXPECT_EQ(messages(rechecked.diagnostics), messages(checked.diagnostics)) << *formatted;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = stem(info.param);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

std::vector<std::string> warnings_only_files() {
  std::vector<std::string> files;
  for (const auto& path : list_files(malformed_dir(), ".fp8")) {
    const MalformedFile file = load_malformed(path);
    if (!file.expects_errors() && file.expects_warnings()) files.push_back(path);
  }
  return files;
}

INSTANTIATE_TEST_SUITE_P(Files, MalformedTest,
                         ::testing::ValuesIn(list_files(malformed_dir(), ".fp8")), test_name);
INSTANTIATE_TEST_SUITE_P(Files, WarningsOnlyTest, ::testing::ValuesIn(warnings_only_files()),
                         test_name);

// What the folder as a whole must cover.
TEST(MalformedFolder, CoversTheLanguagesMistakes) {
  const auto files = list_files(malformed_dir(), ".fp8");
  EXPECT_GE(files.size(), 70u);
  std::size_t warnings_only = 0, with_notes = 0, several_errors = 0;
  for (const auto& path : files) {
    const MalformedFile file = load_malformed(path);
    if (!file.expects_errors() && file.expects_warnings()) ++warnings_only;
    const auto count = [&](const char* severity) {
      return std::count_if(file.expectations.begin(), file.expectations.end(),
                           [&](const Expectation& e) { return e.severity == severity; });
    };
    if (count("note") > 0) ++with_notes;
    if (count("error") >= 3) ++several_errors;
  }
  EXPECT_GE(warnings_only, 1u);
  EXPECT_GE(with_notes, 1u);
  EXPECT_GE(several_errors, 1u);
  for (const char* prefix : {"syntax_", "lexical_", "number_", "key_", "enum_", "duplicate_",
                             "reference_", "layer_", "chain_", "target_", "multi_", "warning_"}) {
    EXPECT_TRUE(std::any_of(files.begin(), files.end(),
                            [&](const std::string& f) { return stem(f).rfind(prefix, 0) == 0; }))
        << "no malformed file named " << prefix << "*";
  }
}

}  // namespace
}  // namespace fp8c::test
