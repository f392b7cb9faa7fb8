// The .fp8 grammar, in Boost.Spirit X3. This is the only translation unit
// that includes X3: everything else sees `parse_file` and the plain AST of
// ast.hpp, so nothing else pays X3's compile time.
//
// The grammar only knows the shape of the language (declarations, entries,
// atoms, blocks); meaning belongs to the checker. Before X3 sees the text,
// prescan.cpp has rejected what a recursive-descent parser must never meet:
// NUL and invalid UTF-8, stray bytes, and blocks nested past a fixed depth.

#include "dsl/parser.hpp"

#include <boost/fusion/include/adapt_struct.hpp>
#include <boost/optional.hpp>
#include <boost/spirit/home/x3.hpp>
#include <boost/spirit/home/x3/support/ast/variant.hpp>

#include "dsl/prescan.hpp"

namespace fp8c::dsl {
namespace x3ast {

namespace x3 = boost::spirit::x3;

// X3's attribute types: mirror ast.hpp, plus what X3 needs to build them.
// Positions are filled by `annotate` below, not parsed.
struct word {
  std::string text;
  SourceRange where;
};
struct number {
  std::string text;
  SourceRange where;
};
struct block;
struct atom : x3::variant<word, number, x3::forward_ast<block>> {
  using base_type::base_type;
  using base_type::operator=;
};
struct entry {
  word key;
  std::vector<atom> value;
  SourceRange where;
};
struct block {
  std::vector<entry> entries;
  SourceRange where;
};
struct declaration {
  word kind;
  boost::optional<word> name;
  std::vector<atom> value;
  SourceRange where;
};

}  // namespace x3ast
}  // namespace fp8c::dsl

BOOST_FUSION_ADAPT_STRUCT(fp8c::dsl::x3ast::word, text)
BOOST_FUSION_ADAPT_STRUCT(fp8c::dsl::x3ast::number, text)
BOOST_FUSION_ADAPT_STRUCT(fp8c::dsl::x3ast::entry, key, value)
BOOST_FUSION_ADAPT_STRUCT(fp8c::dsl::x3ast::block, entries)
BOOST_FUSION_ADAPT_STRUCT(fp8c::dsl::x3ast::declaration, kind, name, value)

namespace fp8c::dsl {
namespace grammar {

namespace x3 = boost::spirit::x3;
using Iterator = std::string::const_iterator;

// The start of the text, handed to every rule through the context so that
// `annotate` can turn iterators into byte offsets.
struct text_begin_tag;

// Records where each node was found. X3 calls on_success with `first`
// already past leading whitespace and comments.
struct annotate {
  template <typename It, typename Node, typename Context>
  void on_success(It const& first, It const& last, Node& node, Context const& context) const {
    if constexpr (requires { node.where; }) {
      const It& begin = x3::get<text_begin_tag>(context);
      node.where = {static_cast<std::uint32_t>(first - begin),
                    static_cast<std::uint32_t>(last - begin)};
    }
  }
};

struct word_id : annotate {};
struct number_id : annotate {};
struct block_id : annotate {};
struct entries_id {};
struct entry_id : annotate {};
struct atom_id {};
struct value_id {};
struct top_atom_id {};
struct top_value_id {};
struct declaration_id : annotate {};

// Rule names are what a user reads after "expected".
const x3::rule<word_id, x3ast::word> word = "a name";
const x3::rule<number_id, x3ast::number> number = "a number";
const x3::rule<block_id, x3ast::block> block = "a block";
const x3::rule<entries_id, std::vector<x3ast::entry>> entries = "a key";
const x3::rule<entry_id, x3ast::entry> entry = "a key";
const x3::rule<atom_id, x3ast::atom> atom = "a value";
const x3::rule<value_id, std::vector<x3ast::atom>> value = "a value";
const x3::rule<top_atom_id, x3ast::atom> top_atom = "a value";
const x3::rule<top_value_id, std::vector<x3ast::atom>> top_value = "a value";
const x3::rule<declaration_id, x3ast::declaration> declaration = "a declaration";

using x3::ascii::alnum;
using x3::ascii::alpha;
using x3::ascii::digit;
using x3::lexeme;
using x3::lit;
using x3::raw;

const auto word_def = raw[lexeme[(alpha | '_') >> *(alnum | '_')]];
// Numbers are taken loosely here ("8k", "1.5", "-3", "99999999999999999999")
// so that the checker can say what is wrong with them, at their position.
const auto number_def = raw[lexeme[-lit('-') >> digit >> *(alnum | '_' | '.')]];
const auto entries_def = *((!(lit('}') | x3::eoi)) > entry);
const auto block_def = lit('{') > entries > lit('}');
const auto entry_def = word > lit('=') > value;
// Inside a block a value ends where the next `key =` begins.
const auto atom_def = number | block | (word >> !lit('='));
const auto value_def = +atom;
// At the top level it also ends where the next declaration begins: `kind =`
// or `kind name =`. Only `target` and `backend` are declared without a
// name, so in `... W target = sm_90a` the word W ends a value and
// `target =` begins the next declaration, unless W is itself a declaration
// keyword (`layer target = ...` declares a layer named "target").
const auto keyword = [](const char* k) { return lexeme[lit(k) >> !(alnum | '_')]; };
const auto nameless_keyword = keyword("target") | keyword("backend");
const auto declaration_keyword =
    keyword("recipe") | keyword("layout") | keyword("layer") | keyword("debug") | nameless_keyword;
const auto top_atom_def =
    number | block | (&declaration_keyword >> word >> !(lit('=') | (word >> lit('=')))) |
    (!declaration_keyword >> word >> !(lit('=') | (!nameless_keyword >> word >> lit('='))));
const auto top_value_def = +top_atom;
// The name is optional (`target = ...` has none); taking any second word as
// the name makes `recipe hybrid delayed { ... }` fail at `delayed`, where the
// '=' is missing.
const auto declaration_def = (word >> -word) > lit('=') > top_value;

BOOST_SPIRIT_DEFINE(word, number, block, entries, entry, atom, value, top_atom, top_value, declaration)

const auto skipper = x3::ascii::space | lexeme['#' >> *(x3::standard::char_ - '\n')];

// The skipper's job done by hand, for positions outside a parse.
Iterator skip_space_and_comments(Iterator it, Iterator end) {
  while (it != end) {
    if (*it == '#') {
      while (it != end && *it != '\n') ++it;
    } else if (*it == ' ' || *it == '\t' || *it == '\n' || *it == '\r' || *it == '\f' ||
               *it == '\v') {
      ++it;
    } else {
      break;
    }
  }
  return it;
}

}  // namespace grammar

namespace {

struct Converter {
  ast::Word word(const x3ast::word& w) const { return {w.text, w.where}; }

  ast::Atom atom(const x3ast::atom& a) const {
    ast::Atom out;
    struct Visitor {
      const Converter& self;
      ast::Atom& out;
      void operator()(const x3ast::word& w) const {
        out.kind = ast::Atom::Kind::word;
        out.text = w.text;
        out.where = w.where;
      }
      void operator()(const x3ast::number& n) const {
        out.kind = ast::Atom::Kind::number;
        out.text = n.text;
        out.where = n.where;
      }
      void operator()(const boost::spirit::x3::forward_ast<x3ast::block>& b) const {
        out.kind = ast::Atom::Kind::block;
        out.block = std::make_shared<ast::Block>(self.block(b.get()));
        out.where = b.get().where;
      }
    };
    boost::apply_visitor(Visitor{*this, out}, a);
    return out;
  }

  std::vector<ast::Atom> atoms(const std::vector<x3ast::atom>& in) const {
    std::vector<ast::Atom> out;
    out.reserve(in.size());
    for (const auto& a : in) out.push_back(atom(a));
    return out;
  }

  ast::Block block(const x3ast::block& b) const {
    ast::Block out;
    out.where = b.where;
    for (const auto& e : b.entries) out.entries.push_back({word(e.key), atoms(e.value), e.where});
    return out;
  }

  ast::Declaration declaration(const x3ast::declaration& d) const {
    ast::Declaration out;
    out.kind = word(d.kind);
    if (d.name) {
      out.name = word(*d.name);
      out.has_name = true;
    }
    out.value = atoms(d.value);
    out.where = d.where;
    return out;
  }
};

// X3 names a failed literal as '=' and a failed rule by its name.
std::string describe_expected(const std::string& which) {
  return which.empty() ? std::string("something else") : which;
}

// Where parsing resumes after a syntax error: the next line that starts, in
// column 1, with a word (canonically formatted files start every declaration
// there). Returns the text's end when there is none.
std::size_t resync_point(const std::string& text, std::size_t from) {
  std::size_t pos = text.find('\n', from);
  while (pos != std::string::npos) {
    ++pos;
    if (pos < text.size() && (std::isalpha(static_cast<unsigned char>(text[pos])) ||
                              text[pos] == '_'))
      return pos;
    pos = text.find('\n', pos);
  }
  return text.size();
}

// The end of the last token before `pos`, skipping back over whitespace and
// comments (every '#' starts a comment: the language has no strings); 0 when
// there is none.
std::size_t previous_token_end(const std::string& text, std::size_t pos) {
  while (pos > 0) {
    const std::size_t newline = text.rfind('\n', pos - 1);
    const std::size_t line_begin = newline == std::string::npos ? 0 : newline + 1;
    const std::size_t hash = std::string_view(text).substr(line_begin, pos - line_begin).find('#');
    std::size_t end = hash == std::string_view::npos ? pos : line_begin + hash;
    while (end > line_begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
    if (end > line_begin) return end;
    if (line_begin == 0) return 0;
    pos = line_begin - 1;
  }
  return 0;
}

// The innermost '{' between `from` and the end of the text that no '}'
// closes; npos when every block is closed.
std::size_t unclosed_brace(const std::string& text, std::size_t from) {
  std::vector<std::size_t> open;
  for (std::size_t i = from; i < text.size(); ++i) {
    if (text[i] == '#') {
      i = text.find('\n', i);
      if (i == std::string::npos) break;
    } else if (text[i] == '{') {
      open.push_back(i);
    } else if (text[i] == '}' && !open.empty()) {
      open.pop_back();
    }
  }
  return open.empty() ? std::string::npos : open.back();
}

}  // namespace

ast::File parse_file(const SourceFile& file, Diagnostics& diagnostics) {
  namespace x3 = boost::spirit::x3;
  ast::File result;
  if (!prescan(file, diagnostics)) return result;

  const std::string& text = file.text();
  const grammar::Iterator begin = text.begin();
  const grammar::Iterator end = text.end();
  grammar::Iterator it = begin;
  const auto parser = x3::with<grammar::text_begin_tag>(begin)[grammar::declaration];
  const Converter convert;

  // Past the error limit, errors are still counted (not stored), so that the
  // report can say how many more there are.
  while (true) {
    it = grammar::skip_space_and_comments(it, end);
    if (it == end) break;
    x3ast::declaration decl;
    std::uint32_t error_at = 0;
    std::string message;
    std::size_t unclosed = std::string::npos;
    try {
      if (x3::phrase_parse(it, end, parser, grammar::skipper, decl)) {
        result.declarations.push_back(convert.declaration(decl));
        continue;
      }
      error_at = static_cast<std::uint32_t>(it - begin);
      message = "expected a declaration such as `layer NAME = linear { ... }`";
    } catch (const x3::expectation_failure<grammar::Iterator>& failure) {
      grammar::Iterator where = failure.where();
      where = grammar::skip_space_and_comments(where, end);
      error_at = static_cast<std::uint32_t>(where - begin);
      message = "expected " + describe_expected(failure.which());
      if (where == end) message += " before the end of the file";
      if (where == end && failure.which() == "'}'") unclosed = unclosed_brace(text, it - begin);
      // Something missing at the end of a line (`target =` and nothing after
      // it) is reported there, not at the next line's first token, when that
      // token looks fine where it is: a name, a '}' or the end of the file.
      // Anything else ('{', a number, a stray ',') is itself the mistake.
      const bool next_looks_fine = where == end || *where == '}' || *where == '_' ||
                                   std::isalpha(static_cast<unsigned char>(*where));
      const std::size_t previous = previous_token_end(text, error_at);
      if (next_looks_fine && previous > 0 && text.find('\n', previous) < error_at)
        error_at = static_cast<std::uint32_t>(previous);
    }
    const std::uint32_t token_end =
        error_at < text.size() ? error_at + 1 : static_cast<std::uint32_t>(text.size());
    diagnostics.error({error_at, token_end}, message);
    if (unclosed != std::string::npos) {
      const auto brace = static_cast<std::uint32_t>(unclosed);
      diagnostics.note({brace, brace + 1}, "this '{' is not closed");
    }
    std::size_t next = resync_point(text, std::max<std::size_t>(error_at, it - begin));
    it = begin + static_cast<std::ptrdiff_t>(next);
  }
  return result;
}

}  // namespace fp8c::dsl
