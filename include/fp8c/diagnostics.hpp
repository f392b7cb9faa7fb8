// Source text and the errors, warnings and notes reported against it.
// Every message a user sees about a .fp8 file goes through here, so they all
// read `file:line:col: error: message`, then the line and a caret.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fp8c {

// A half-open byte range [begin, end) in a source file.
struct SourceRange {
  std::uint32_t begin = 0;
  std::uint32_t end = 0;
};

class SourceFile {
 public:
  SourceFile(std::string path, std::string text);

  const std::string& path() const { return path_; }
  const std::string& text() const { return text_; }

  // 1-based line and column (in bytes) of a byte offset.
  struct LineCol {
    std::uint32_t line;
    std::uint32_t col;
  };
  LineCol line_col(std::uint32_t offset) const;
  std::string_view line_text(std::uint32_t line) const;

 private:
  std::string path_;
  std::string text_;
  std::vector<std::uint32_t> line_starts_;
};

enum class Severity { error, warning, note };

struct Diagnostic {
  Severity severity = Severity::error;
  SourceRange where;
  std::string message;
};

// Collects diagnostics up to a limit; past it, further errors are counted but
// not stored, and `render` says how many were dropped.
class Diagnostics {
 public:
  static constexpr std::size_t kMaxErrors = 20;

  void error(SourceRange where, std::string message);
  void warning(SourceRange where, std::string message);
  void note(SourceRange where, std::string message);

  bool has_errors() const { return error_count_ > 0; }
  std::size_t error_count() const { return error_count_; }
  bool full() const { return error_count_ >= kMaxErrors; }
  const std::vector<Diagnostic>& all() const { return items_; }

  // `file:line:col: severity: message`, the source line and a caret, for each.
  std::string render(const SourceFile& file) const;

 private:
  std::vector<Diagnostic> items_;
  std::size_t error_count_ = 0;
  bool dropping_notes_ = false;  // notes follow the error they explain
};

// Reads a file whole. Throws std::runtime_error naming the path and the
// reason when it cannot be read or is larger than kMaxSourceBytes.
inline constexpr std::size_t kMaxSourceBytes = std::size_t{256} << 20;
SourceFile read_source_file(const std::string& path);

// One diagnostic in the standard form (also used for single messages).
std::string render_diagnostic(const SourceFile& file, const Diagnostic& d);

}  // namespace fp8c
