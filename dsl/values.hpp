// Reading typed values out of AST atoms, each failure a diagnostic at the
// atom that is wrong. Shared by every part of the checker.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/ast.hpp"
#include "dsl/enum_names.hpp"
#include "dsl/suggest.hpp"
#include "fp8c/diagnostics.hpp"

namespace fp8c::dsl {

class ValueReader {
 public:
  explicit ValueReader(Diagnostics& diagnostics) : diagnostics_(diagnostics) {}

  Diagnostics& diagnostics() { return diagnostics_; }

  // The entry's only atom; an error at the second atom if there are more.
  const ast::Atom* single(const ast::Entry& entry);

  // An unsigned integer in [min, max]; `what` names it in messages.
  std::optional<std::uint64_t> integer(const ast::Atom& atom, std::string_view what,
                                       std::uint64_t min, std::uint64_t max);

  std::optional<bool> boolean(const ast::Atom& atom, std::string_view what);

  // A word of vocabulary V (an enum, or DTypeWords / Fp8FormatWords);
  // unknown words get "did you mean" and the list of allowed words.
  template <typename V>
  std::optional<ValueOf<V>> word(const ast::Atom& atom, std::string_view what) {
    if (!expect_word(atom, what)) return std::nullopt;
    for (const auto& [name, value] : names<V>())
      if (name == atom.text) return value;
    std::vector<std::string_view> allowed;
    for (const auto& entry : names<V>()) allowed.push_back(entry.first);
    unknown_word(atom, what, allowed);
    return std::nullopt;
  }

  // Errors for an atom that must be a word: "expected NAME, found 42".
  bool expect_word(const ast::Atom& atom, std::string_view what);
  void unknown_word(const ast::Atom& atom, std::string_view what,
                    const std::vector<std::string_view>& allowed);

 private:
  Diagnostics& diagnostics_;
};

// Walks the entries of a block: reports unknown keys (with "did you mean"),
// keys that belong to another kind of block (`elsewhere` says which), and
// repeated keys; calls `handle` once for each known key.
struct KeySet {
  std::string_view block_name;                    // "a delayed recipe", "layer 'fc1'"
  std::vector<std::string_view> keys;             // allowed here
  std::vector<std::pair<std::string_view, std::string_view>> elsewhere;  // key, where it belongs
};
void for_each_entry(Diagnostics& diagnostics, const ast::Block& block, const KeySet& keys,
                    const std::function<void(const ast::Entry&)>& handle);

// A short description of an atom for messages: 'word', 42 or 'a block'.
std::string describe(const ast::Atom& atom);

// A word in quotes for a message, cut short (with "...") when it is longer
// than any real name: a 10 MB junk word must not become a 10 MB message.
std::string quoted(std::string_view word);

// The range from the first to the last atom of a value.
SourceRange span_of(const std::vector<ast::Atom>& atoms);

}  // namespace fp8c::dsl
