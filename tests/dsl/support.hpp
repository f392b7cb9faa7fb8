// Shared helpers of the language tests: the malformed-file header format,
// running the real `fp8c` binary, and reading back what it printed.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "fp8c/dsl.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {
// gtest prints a Spec as the text `fp8c explain` would print for it.
void PrintTo(const Spec& spec, std::ostream* out);
}  // namespace fp8c

namespace fp8c::test {

// Paths handed over by CMake.
std::string fp8c_binary();
std::string malformed_dir();
std::string examples_dir();
// A fresh, empty folder for files a test writes (unique per process and name),
// removed when the process exits.
std::string scratch_dir(const std::string& name);

std::string read_file(const std::string& path);
void write_file(const std::string& path, std::string_view text);
// The regular files in `dir` whose names end in `suffix`, sorted, full paths.
std::vector<std::string> list_files(const std::string& dir, const std::string& suffix);
std::string stem(const std::string& path);  // "a/b/syntax_x.fp8" -> "syntax_x"

// One `# expect: LINE:COL: SEVERITY: MESSAGE` line of a malformed file.
struct Expectation {
  std::uint32_t line = 0;
  std::uint32_t col = 0;
  std::string severity;  // error | warning | note
  std::string message;
  std::string str() const;  // "LINE:COL: SEVERITY: MESSAGE"
};

struct MalformedFile {
  std::string path;
  std::string text;
  std::vector<Expectation> expectations;
  std::optional<std::string> arch;           // `# arch: ...`
  std::vector<std::string> header_problems;  // malformed header lines, if any
  bool expects_errors() const;
  bool expects_warnings() const;
};
MalformedFile load_malformed(const std::string& path);

// A diagnostic in the `# expect:` form, positions taken from `file`.
std::string describe(const SourceFile& file, const Diagnostic& d);
std::vector<std::string> describe_all(const SourceFile& file, const Diagnostics& diagnostics);
// Severity and message only, for comparing reports of two texts.
std::vector<std::string> messages(const Diagnostics& diagnostics);

// The line as the renderer shows it: control characters other than tab and
// bytes that are not valid UTF-8 replaced by '?', byte for byte.
std::string printable(std::string_view line);

// Result of running the binary. `status` is the exit status, or -signal.
struct CommandResult {
  int status = -1;
  std::string out;
  std::string err;
  double seconds = 0;
  bool timed_out = false;
};
// Runs `fp8c ARGS...` (no shell), killing it after `timeout_s`.
CommandResult run_fp8c(const std::vector<std::string>& args, double timeout_s = 60);

std::vector<std::string> split_lines(std::string_view text);  // no trailing empty line

// Checks that `lines[at..at+2]` are the rendering of diagnostic `header`
// (`PATH:LINE:COL: SEVERITY: MESSAGE`) against `source`: the header, the
// echoed source line and the caret at the column. Returns "" or a problem.
std::string check_rendering(const std::vector<std::string>& lines, std::size_t at,
                            const std::string& path, const SourceFile& source,
                            const Expectation& expected);

// Positions of `needle` in `text`: 1-based line and column of its first byte.
struct LineCol {
  std::uint32_t line;
  std::uint32_t col;
};
LineCol position_of(std::string_view text, std::string_view needle, std::size_t from = 0);

}  // namespace fp8c::test
