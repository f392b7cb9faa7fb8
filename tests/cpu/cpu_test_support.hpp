// Inline specs for the CPU executor tests.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

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

// Every recipe, as a layer's `recipe =` value (delayed with a short history).
inline const std::vector<std::string>& all_recipes() {
  static const std::vector<std::string> recipes = {"delayed { history = 4 }", "current",
                                                   "blockwise", "mxfp8", "none"};
  return recipes;
}

// One cell of the recipe x {column, row} x {SP on, off} x ranks matrix the
// CPU oracle and the GPU executor are both checked over.
struct MatrixCase {
  std::string recipe;
  std::string mode;
  bool sp;
  int ranks;
};

// Readable test names in ctest's listing instead of the case's bytes.
inline void PrintTo(const MatrixCase& c, std::ostream* os) {
  *os << c.recipe << " " << c.mode << (c.sp ? " sp" : "") << " ranks " << c.ranks;
}

inline std::string matrix_case_name(const ::testing::TestParamInfo<MatrixCase>& info) {
  std::string r = info.param.recipe.substr(0, info.param.recipe.find(' '));
  return r + "_" + info.param.mode + (info.param.sp ? "_sp" : "") + "_" +
         std::to_string(info.param.ranks);
}

inline std::vector<MatrixCase> matrix_cases() {
  std::vector<MatrixCase> cases;
  for (const std::string& recipe : all_recipes())
    for (std::string mode : {"column", "row"})
      for (bool sp : {false, true})
        for (int ranks : {1, 2, 4, 8}) {
          if (ranks == 1 && sp) continue;  // one rank: sequence parallelism is a no-op
          cases.push_back({recipe, mode, sp, ranks});
        }
  return cases;
}

}  // namespace fp8c::cpu::testing
