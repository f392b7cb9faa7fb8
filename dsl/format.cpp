// `fp8c fmt`: the canonical layout of a .fp8 file.
//   - one declaration after another, separated by one blank line;
//   - one entry per line, indented by two spaces a level, '=' aligned within
//     a run of one-line entries (a run ends at a blank line, a comment line or
//     a multi-line entry);
//   - a nested block that is short, flat and comment-free stays on one line:
//     `recipe = current { forward = e4m3  backward = e5m2 }`;
//   - comments are kept: a comment on its own line stays on its own line, a
//     comment after code stays after that code; single blank lines between
//     entries are kept.
// The output depends only on the AST and the comments, so formatting is
// idempotent, and since no atom changes, the file checks to the same Spec.

#include <algorithm>

#include "dsl/parser.hpp"
#include "fp8c/dsl.hpp"

namespace fp8c::dsl {
namespace {

constexpr std::size_t kMaxInlineBlock = 64;  // characters of a one-line `{ ... }`

struct Comment {
  std::uint32_t offset;
  std::string text;  // from '#', trailing whitespace removed
};

std::vector<Comment> find_comments(const std::string& text) {
  std::vector<Comment> comments;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '#') continue;
    std::size_t end = text.find('\n', i);
    if (end == std::string::npos) end = text.size();
    std::size_t trimmed = end;
    while (trimmed > i && std::isspace(static_cast<unsigned char>(text[trimmed - 1]))) --trimmed;
    comments.push_back({static_cast<std::uint32_t>(i), text.substr(i, trimmed - i)});
    i = end;
  }
  return comments;
}

class Formatter {
 public:
  explicit Formatter(const std::string& text) : text_(text), comments_(find_comments(text)) {}

  std::string file(const ast::File& file) {
    bool first = true;
    for (const auto& declaration : file.declarations) {
      if (!first) out_ += '\n';
      first = false;
      own_line_comments(declaration.where.begin, 0, /*keep_blank=*/false);
      std::string line = declaration.kind.text;
      if (declaration.has_name) line += " " + declaration.name.text;
      out_ += line + " = ";
      value(declaration.value, 0);
      end_line(declaration.where.end);
    }
    if (!file.declarations.empty() && next_ < comments_.size()) out_ += '\n';
    own_line_comments(static_cast<std::uint32_t>(text_.size()) + 1, 0, false);
    return out_;
  }

 private:
  bool has_comment_in(SourceRange r) const {
    return std::any_of(comments_.begin() + static_cast<std::ptrdiff_t>(next_), comments_.end(),
                       [&](const Comment& c) { return c.offset >= r.begin && c.offset < r.end; });
  }

  // A block printed on one line, or nothing when it must be multi-line.
  std::optional<std::string> inline_block(const ast::Block& block) const {
    if (has_comment_in(block.where)) return std::nullopt;
    if (block.entries.empty()) return std::string("{}");
    std::string s = "{";
    for (std::size_t i = 0; i < block.entries.size(); ++i) {
      const auto& entry = block.entries[i];
      s += (i == 0 ? " " : "  ") + entry.key.text + " =";
      for (const auto& atom : entry.value) {
        if (atom.kind == ast::Atom::Kind::block) return std::nullopt;
        s += " " + atom.text;
      }
    }
    s += " }";
    if (s.size() > kMaxInlineBlock) return std::nullopt;
    return s;
  }

  bool is_multi_line(const ast::Entry& entry) const {
    for (const auto& atom : entry.value)
      if (atom.kind == ast::Atom::Kind::block && !inline_block(*atom.block)) return true;
    return false;
  }

  void value(const std::vector<ast::Atom>& atoms, int indent) {
    for (std::size_t i = 0; i < atoms.size(); ++i) {
      if (i > 0) out_ += ' ';
      const auto& atom = atoms[i];
      if (atom.kind != ast::Atom::Kind::block) {
        out_ += atom.text;
      } else if (auto one_line = inline_block(*atom.block); one_line && indent > 0) {
        out_ += *one_line;
      } else {
        block(*atom.block, indent);
      }
    }
  }

  void block(const ast::Block& block, int indent) {
    out_ += '{';
    const std::uint32_t first_entry =
        block.entries.empty() ? block.where.end - 1 : block.entries.front().where.begin;
    trailing_comment(block.where.begin + 1, first_entry);  // after the '{'
    out_ += '\n';
    const int inner = indent + 2;
    std::size_t width = 0;  // key width of the current run
    for (std::size_t i = 0; i < block.entries.size(); ++i) {
      const auto& entry = block.entries[i];
      const bool blank_before = i > 0 && blank_line_between(block.entries[i - 1].where.end,
                                                            entry.where.begin);
      if (blank_before) out_ += '\n';
      own_line_comments(entry.where.begin, inner, true);
      if (i == 0 || starts_run(block, i)) width = run_width(block, i);
      out_ += std::string(static_cast<std::size_t>(inner), ' ') + entry.key.text;
      if (!is_multi_line(entry)) out_ += std::string(width - entry.key.text.size(), ' ');
      out_ += " = ";
      value(entry.value, inner);
      end_line(entry.where.end);
    }
    own_line_comments(block.where.end - 1, inner, true);
    out_ += std::string(static_cast<std::size_t>(indent), ' ') + '}';
  }

  // The widest key among the one-line entries from `start` to the end of its run.
  std::size_t run_width(const ast::Block& block, std::size_t start) const {
    std::size_t width = block.entries[start].key.text.size();
    if (is_multi_line(block.entries[start])) return width;
    for (std::size_t j = start + 1; j < block.entries.size() && !starts_run(block, j); ++j)
      width = std::max(width, block.entries[j].key.text.size());
    return width;
  }

  // Whether entry i begins a new run of aligned entries: after a blank line,
  // after a comment printed on a line of its own, or next to a multi-line entry.
  bool starts_run(const ast::Block& block, std::size_t i) const {
    const auto& prev = block.entries[i - 1];
    const auto& entry = block.entries[i];
    return is_multi_line(prev) || is_multi_line(entry) ||
           blank_line_between(prev.where.end, entry.where.begin) ||
           comment_lines_between(prev, entry);
  }

  // Whether comments between two one-line entries will be printed on lines of
  // their own: all of them but one trailing the first entry's line (and that
  // one only if no comment sits inside the first entry, which would come
  // first and so be printed on its own line).
  bool comment_lines_between(const ast::Entry& prev, const ast::Entry& next) const {
    std::size_t inside = 0, after = 0;
    bool trailing = false;
    for (const auto& c : comments_) {
      if (c.offset >= prev.where.begin && c.offset < prev.where.end) ++inside;
      if (c.offset >= prev.where.end && c.offset < next.where.begin) {
        if (after++ == 0) trailing = follows_on_same_line(prev.where.end, c.offset);
      }
    }
    if (inside > 0) return true;
    return after > (trailing ? 1u : 0u);
  }

  bool blank_line_between(std::uint32_t from, std::uint32_t to) const {
    // Blank lines before a leading comment count too.
    int newlines = 0;
    for (std::uint32_t i = from; i < to && i < text_.size(); ++i) {
      if (text_[i] == '#') return newlines >= 2;
      if (text_[i] == '\n') ++newlines;
    }
    return newlines >= 2;
  }

  // Prints the comments that come before `offset` on lines of their own.
  void own_line_comments(std::uint32_t offset, int indent, bool keep_blank) {
    bool any = false;
    while (next_ < comments_.size() && comments_[next_].offset < offset) {
      const Comment& c = comments_[next_];
      const Comment& last = comments_[next_ - (any ? 1 : 0)];
      if (keep_blank && any &&
          blank_line_between(last.offset + static_cast<std::uint32_t>(last.text.size()), c.offset))
        out_ += '\n';
      out_ += std::string(static_cast<std::size_t>(indent), ' ') + c.text + '\n';
      ++next_;
      any = true;
    }
  }

  // Whether only spaces stand between `end` and a comment at `comment`.
  bool follows_on_same_line(std::uint32_t end, std::uint32_t comment) const {
    for (std::uint32_t i = end; i < comment; ++i)
      if (text_[i] != ' ' && text_[i] != '\t') return false;
    return true;
  }

  // A comment that follows `offset` on the same source line (before `limit`)
  // stays at the end of the printed line.
  void trailing_comment(std::uint32_t offset, std::uint32_t limit) {
    if (next_ >= comments_.size()) return;
    const Comment& c = comments_[next_];
    if (c.offset < offset || c.offset >= limit || !follows_on_same_line(offset, c.offset)) return;
    out_ += "  " + c.text;
    ++next_;
  }

  void end_line(std::uint32_t end) {
    std::size_t line_end = text_.find('\n', end);
    if (line_end == std::string::npos) line_end = text_.size();
    trailing_comment(end, static_cast<std::uint32_t>(line_end));
    out_ += '\n';
  }

  const std::string& text_;
  std::vector<Comment> comments_;
  std::size_t next_ = 0;
  std::string out_;
};

}  // namespace
}  // namespace fp8c::dsl

namespace fp8c {

std::optional<std::string> format_source(const SourceFile& file, Diagnostics& diagnostics) {
  const ast::File syntax = dsl::parse_file(file, diagnostics);
  if (diagnostics.has_errors()) return std::nullopt;
  return dsl::Formatter(file.text()).file(syntax);
}

}  // namespace fp8c
