// Byte-level checks that run before the grammar sees a file.
#pragma once

#include "fp8c/diagnostics.hpp"

namespace fp8c::dsl {

// The deepest `{` nesting a file may have. Real specs use two or three
// levels; the bound keeps the recursive-descent parser's stack small whatever
// the input.
inline constexpr int kMaxBlockDepth = 32;

// Rejects NUL bytes, invalid UTF-8, non-ASCII bytes outside comments, control
// characters, and nesting past kMaxBlockDepth. Returns false (with one error
// naming the first offending byte) when the file must not be parsed.
bool prescan(const SourceFile& file, Diagnostics& diagnostics);

// Length of the valid UTF-8 sequence starting at text[pos], or 0 if invalid.
std::size_t utf8_sequence_length(const std::string& text, std::size_t pos);

}  // namespace fp8c::dsl
