// The syntax tree of a .fp8 file. The language is regular on purpose: a file
// is a list of declarations `kind [name] = value`, a value is a list of atoms,
// an atom is a word, a number or a `{ key = value ... }` block. What the
// words mean is the checker's business, not the grammar's, so the grammar
// stays small and every message about meaning can point at an exact atom.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fp8c/diagnostics.hpp"

namespace fp8c::ast {

struct Word {
  std::string text;
  SourceRange where;
};

struct Block;

struct Atom {
  enum class Kind { word, number, block };
  Kind kind = Kind::word;
  std::string text;               // word or number, as written
  std::shared_ptr<Block> block;   // set when kind == block
  SourceRange where;
};

// `key = atom atom ...`
struct Entry {
  Word key;
  std::vector<Atom> value;
  SourceRange where;
};

struct Block {
  std::vector<Entry> entries;
  SourceRange where;
};

// A top-level `kind [name] = value`, e.g. `recipe hybrid = delayed { ... }`
// or `target = sm_90a`.
struct Declaration {
  Word kind;
  Word name;  // empty text when there is none
  bool has_name = false;
  std::vector<Atom> value;
  SourceRange where;
};

struct File {
  std::vector<Declaration> declarations;
};

}  // namespace fp8c::ast
