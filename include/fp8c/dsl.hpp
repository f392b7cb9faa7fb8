// The front end of fp8c: .fp8 text in, a checked Spec (or diagnostics) out.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include "fp8c/diagnostics.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

struct CheckOptions {
  // Overrides the file's `target =` (the command line's --arch).
  std::optional<Target> target{};
  // Overrides the file's `backend =` (the command line's --backend).
  std::optional<KernelBackend> backend{};
};

struct CheckResult {
  std::optional<Spec> spec;  // set only when there are no errors
  Diagnostics diagnostics;   // errors, warnings and notes, in file order per phase
};

// Parses and checks one file. Never throws for bad input: every problem with
// the text is a diagnostic.
CheckResult check_source(const SourceFile& file, const CheckOptions& options = {});

// Canonical formatting of a file that parses (comments kept). nullopt and
// diagnostics when it does not parse.
std::optional<std::string> format_source(const SourceFile& file, Diagnostics& diagnostics);

// A checked Spec printed back as .fp8 text with every default written out;
// the result checks to an equal Spec.
std::string explain_spec(const Spec& spec);

// Thrown by the host API when a spec does not check; what() is the rendered
// diagnostics (`file:line:col: error: ...`).
class SpecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads and checks a file, throwing SpecError (or std::runtime_error when the
// file cannot be read).
Spec load_spec(const std::string& path, const CheckOptions& options = {});

}  // namespace fp8c
