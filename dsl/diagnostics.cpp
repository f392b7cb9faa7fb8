#include "fp8c/diagnostics.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "dsl/prescan.hpp"

namespace fp8c {

SourceFile::SourceFile(std::string path, std::string text)
    : path_(std::move(path)), text_(std::move(text)) {
  line_starts_.push_back(0);
  for (std::size_t i = 0; i < text_.size(); ++i)
    if (text_[i] == '\n') line_starts_.push_back(static_cast<std::uint32_t>(i + 1));
}

SourceFile::LineCol SourceFile::line_col(std::uint32_t offset) const {
  offset = std::min<std::uint32_t>(offset, static_cast<std::uint32_t>(text_.size()));
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const auto line = static_cast<std::uint32_t>(it - line_starts_.begin());
  return {line, offset - line_starts_[line - 1] + 1};
}

std::string_view SourceFile::line_text(std::uint32_t line) const {
  if (line == 0 || line > line_starts_.size()) return {};
  const std::uint32_t begin = line_starts_[line - 1];
  std::uint32_t end =
      line < line_starts_.size() ? line_starts_[line] - 1 : static_cast<std::uint32_t>(text_.size());
  if (end > begin && text_[end - 1] == '\r') --end;
  return std::string_view(text_).substr(begin, end - begin);
}

SourceFile read_source_file(const std::string& path) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored))
    throw std::runtime_error(path + ": is a directory, not a .fp8 file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw std::runtime_error(path + ": cannot read (not a regular file?)");
  if (static_cast<std::size_t>(size) > kMaxSourceBytes)
    throw std::runtime_error(path + ": file is " + std::to_string(size) + " bytes; the limit is " +
                             std::to_string(kMaxSourceBytes));
  in.seekg(0);
  std::string text(static_cast<std::size_t>(size), '\0');
  if (!in.read(text.data(), size)) throw std::runtime_error(path + ": read failed");
  return SourceFile(path, std::move(text));
}

namespace {

std::string_view severity_name(Severity s) {
  switch (s) {
    case Severity::error:
      return "error";
    case Severity::warning:
      return "warning";
    case Severity::note:
      return "note";
  }
  return "error";
}

// The widest stretch of a source line shown under a message: a 10 MB line is
// cut to a window around the caret, marked with "...".
constexpr std::uint32_t kShownColumns = 160;

// The longest message kept; the checker already shortens the words it
// quotes, this bounds the rest (e.g. absurdly long names).
constexpr std::size_t kMaxMessageBytes = 1000;

std::string bounded(std::string message) {
  if (message.size() > kMaxMessageBytes) {
    message.resize(kMaxMessageBytes - 3);
    message += "...";
  }
  return message;
}

// A source line as shown to a terminal: control characters (escape
// sequences!) and bytes that are not valid UTF-8 become '?', one for one, so
// the caret still lines up.
std::string printable(std::string_view line) {
  std::string out(line);
  for (std::size_t i = 0; i < out.size();) {
    const auto c = static_cast<unsigned char>(out[i]);
    if (c >= 0x80) {
      const std::size_t length = dsl::utf8_sequence_length(out, i);
      if (length == 0) {
        out[i++] = '?';
      } else {
        i += length;
      }
      continue;
    }
    if ((c < 0x20 && c != '\t') || c == 0x7F) out[i] = '?';
    ++i;
  }
  return out;
}

}  // namespace

void Diagnostics::error(SourceRange where, std::string message) {
  ++error_count_;
  dropping_notes_ = error_count_ > kMaxErrors;
  if (!dropping_notes_) items_.push_back({Severity::error, where, bounded(std::move(message))});
}

void Diagnostics::warning(SourceRange where, std::string message) {
  dropping_notes_ = false;
  items_.push_back({Severity::warning, where, bounded(std::move(message))});
}

void Diagnostics::note(SourceRange where, std::string message) {
  if (!dropping_notes_) items_.push_back({Severity::note, where, bounded(std::move(message))});
}

std::string render_diagnostic(const SourceFile& file, const Diagnostic& d) {
  const auto lc = file.line_col(d.where.begin);
  std::string out = file.path() + ":" + std::to_string(lc.line) + ":" + std::to_string(lc.col) +
                    ": " + std::string(severity_name(d.severity)) + ": " + d.message + "\n";

  std::string_view line = file.line_text(lc.line);
  std::uint32_t caret = lc.col - 1;  // 0-based byte offset within the line
  std::string prefix;
  if (line.size() > kShownColumns) {
    const std::uint32_t start = caret > kShownColumns / 2 ? caret - kShownColumns / 2 : 0;
    if (start > 0) prefix = "...";
    line = line.substr(start, kShownColumns);
    caret -= start;
  }
  out += "  " + prefix + printable(line) + "\n  " + std::string(prefix.size(), ' ');
  // Tabs stay tabs so the caret lines up however the terminal expands them.
  for (std::uint32_t i = 0; i < caret && i < line.size(); ++i) out += line[i] == '\t' ? '\t' : ' ';
  out += '^';
  const std::uint32_t width =
      d.where.end > d.where.begin ? std::min<std::uint32_t>(d.where.end - d.where.begin, 80) : 1;
  for (std::uint32_t i = 1; i < width && caret + i < line.size(); ++i) out += '~';
  out += '\n';
  return out;
}

std::string Diagnostics::render(const SourceFile& file) const {
  std::string out;
  for (const auto& d : items_) out += render_diagnostic(file, d);
  if (error_count_ > kMaxErrors)
    out += file.path() + ": " + std::to_string(error_count_ - kMaxErrors) +
           " more errors not shown (limit " + std::to_string(kMaxErrors) + ")\n";
  return out;
}

}  // namespace fp8c
