#include "dsl/values.hpp"

#include <algorithm>
#include <map>

namespace fp8c::dsl {

std::string quoted(std::string_view word) {
  const bool cut = word.size() > 32;
  std::string out = "'";
  out.append(cut ? word.substr(0, 29) : word);
  out.append(cut ? "...'" : "'");
  return out;
}

std::string describe(const ast::Atom& atom) {
  switch (atom.kind) {
    case ast::Atom::Kind::word:
      return quoted(atom.text);
    case ast::Atom::Kind::number:
      return atom.text.size() > 32 ? atom.text.substr(0, 29) + "..." : atom.text;
    case ast::Atom::Kind::block:
      return "a block";
  }
  return "?";
}

SourceRange span_of(const std::vector<ast::Atom>& atoms) {
  if (atoms.empty()) return {};
  return {atoms.front().where.begin, atoms.back().where.end};
}

const ast::Atom* ValueReader::single(const ast::Entry& entry) {
  if (entry.value.empty()) return nullptr;  // the grammar never builds one
  if (entry.value.size() > 1) {
    diagnostics_.error(entry.value[1].where, "unexpected " + describe(entry.value[1]) + ": '" +
                                                 entry.key.text + "' takes one value");
    return nullptr;
  }
  return &entry.value.front();
}

bool ValueReader::expect_word(const ast::Atom& atom, std::string_view what) {
  if (atom.kind == ast::Atom::Kind::word) return true;
  diagnostics_.error(atom.where,
                     "expected " + std::string(what) + ", found " + describe(atom));
  return false;
}

void ValueReader::unknown_word(const ast::Atom& atom, std::string_view what,
                               const std::vector<std::string_view>& allowed) {
  std::string message = "unknown " + std::string(what) + " " + quoted(atom.text);
  const std::string hint = did_you_mean(atom.text, allowed);
  if (!hint.empty()) {
    message += hint;
  } else if (!allowed.empty() && allowed.size() <= 8) {
    message += " (expected";
    for (std::size_t i = 0; i < allowed.size(); ++i)
      message += (i == 0 ? " " : i + 1 == allowed.size() ? " or " : ", ") + std::string(allowed[i]);
    message += ")";
  }
  diagnostics_.error(atom.where, message);
}

std::optional<std::uint64_t> ValueReader::integer(const ast::Atom& atom, std::string_view what,
                                                  std::uint64_t min, std::uint64_t max) {
  if (atom.kind != ast::Atom::Kind::number) {
    diagnostics_.error(atom.where, std::string(what) + " must be a number, found " + describe(atom));
    return std::nullopt;
  }
  const std::string& text = atom.text;
  if (text[0] == '-') {
    diagnostics_.error(atom.where,
                       std::string(what) + " must not be negative, found " + describe(atom));
    return std::nullopt;
  }
  std::uint64_t value = 0;
  bool overflow = false;
  for (char c : text) {
    if (c < '0' || c > '9') {
      diagnostics_.error(atom.where, std::string(what) + " must be a whole number, found '" +
                                         describe(atom) + "'");
      return std::nullopt;
    }
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) overflow = true;
    if (!overflow) value = value * 10 + digit;
  }
  if (overflow || value > max) {
    diagnostics_.error(atom.where, std::string(what) + " = " + describe(atom) +
                                       " is too large (at most " + std::to_string(max) + ")");
    return std::nullopt;
  }
  if (value < min) {
    diagnostics_.error(atom.where, std::string(what) + " = " + describe(atom) +
                                       " is too small (at least " + std::to_string(min) + ")");
    return std::nullopt;
  }
  return value;
}

std::optional<bool> ValueReader::boolean(const ast::Atom& atom, std::string_view what) {
  if (!expect_word(atom, "true or false for " + std::string(what))) return std::nullopt;
  if (atom.text == "true") return true;
  if (atom.text == "false") return false;
  diagnostics_.error(atom.where, std::string(what) + " must be true or false, found " +
                                     describe(atom) + did_you_mean(atom.text, {"true", "false"}));
  return std::nullopt;
}

void for_each_entry(Diagnostics& diagnostics, const ast::Block& block, const KeySet& keys,
                    const std::function<void(const ast::Entry&)>& handle) {
  std::map<std::string, const ast::Entry*> seen;
  for (const auto& entry : block.entries) {
    const std::string& key = entry.key.text;
    const bool known = std::find(keys.keys.begin(), keys.keys.end(), key) != keys.keys.end();
    if (!known) {
      const auto other = std::find_if(keys.elsewhere.begin(), keys.elsewhere.end(),
                                      [&](const auto& pair) { return pair.first == key; });
      if (other != keys.elsewhere.end()) {
        diagnostics.error(entry.key.where, "'" + key + "' is not a setting of " +
                                               std::string(keys.block_name) + "; it belongs to " +
                                               std::string(other->second));
      } else {
        diagnostics.error(entry.key.where, "unknown key " + quoted(key) + " in " +
                                               std::string(keys.block_name) +
                                               did_you_mean(key, keys.keys));
      }
      continue;
    }
    if (auto [it, inserted] = seen.emplace(key, &entry); !inserted) {
      diagnostics.error(entry.key.where, "'" + key + "' is set twice in " +
                                             std::string(keys.block_name));
      diagnostics.note(it->second->key.where, "first set here");
      continue;
    }
    handle(entry);
  }
}

}  // namespace fp8c::dsl
