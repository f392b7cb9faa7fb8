// Inline specs for the CPU executor tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "fp8c/dsl.hpp"

namespace fp8c::cpu::testing {

inline Spec spec_from(const std::string& text) {
  auto r = check_source(SourceFile("inline.fp8", text));
  if (!r.spec) {
    std::string m;
    for (const auto& d : r.diagnostics.all()) m += d.message + "\n";
    throw std::runtime_error("bad inline spec:\n" + text + "\n" + m);
  }
  return *r.spec;
}

// One linear layer `l` with the given recipe body (e.g. "delayed { history = 4 }").
inline std::string layer_text(const std::string& recipe, const std::string& mode, bool sp, int tp,
                              int in, int out, const std::string& extra = "bias = true") {
  return "layer l = linear {\n  in = " + std::to_string(in) + "  out = " + std::to_string(out) +
         "  " + extra + "\n  recipe = " + recipe +
         "\n  layout = { tensor_parallel = " + std::to_string(tp) +
         "  sequence_parallel = " + (sp ? "true" : "false") + " } " + mode + "\n}\n";
}

}  // namespace fp8c::cpu::testing
