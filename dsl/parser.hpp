// The X3-free face of the grammar (dsl/parser.cpp).
#pragma once

#include "dsl/ast.hpp"
#include "fp8c/diagnostics.hpp"

namespace fp8c::dsl {

// Parses a whole file. Syntax errors become diagnostics; after one, parsing
// resumes at the next declaration so that several are reported at once.
// Declarations that parsed are returned either way.
ast::File parse_file(const SourceFile& file, Diagnostics& diagnostics);

}  // namespace fp8c::dsl
