// A table of measured GEMM times, the generated GEMM's against cuBLASLt's,
// per form and shape: what `gemm = auto` consults (lower.cpp) where both
// backends run a GEMM in FP8, instead of its fixed rule. `gemm_bench --table
// FILE` writes one on the GPU it runs on; the runtime reads it from
// FP8C_GEMM_TABLE or the cubin cache directory (runtime/gemm/gemm_table_file.hpp),
// `fp8c plan --lowered --gemm-table FILE` on any machine.
//
// The file is text, one measurement a line after a header:
//
//     fp8c-gemm-table 1
//     gpu NVIDIA H200
//     # anything after a '#' is a comment
//     per_tensor 8192 8192 8192 0.912 0.752
//
// that is: form, M, N, K, the generated GEMM's milliseconds, cuBLASLt's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fp8c {

// The GEMM forms both backends run in FP8, as the executor calls them:
// per-tensor scales promoted every 128 K (the executor never asks for fast
// accumulation), 1x128 x 128x128 (fprop, dgrad) and 1x128 x 1x128 (wgrad)
// block scales.
enum class GemmForm { per_tensor, block_1x128_128x128, block_1x128_1x128 };

std::string_view to_string(GemmForm form);

struct GemmTableEntry {
  GemmForm form = GemmForm::per_tensor;
  std::uint64_t m = 0, n = 0, k = 0;
  double generated_ms = 0, cublaslt_ms = 0;
};

struct GemmTable {
  std::string source;  // where it was read from, for notes and errors
  std::string gpu;     // the GPU it was measured on
  std::vector<GemmTableEntry> entries;

  // The entry of `form` nearest (m, n, k), measured by the sum of the
  // dims' log2 ratios, among those within a factor of 2 of it in every
  // dim; null where there is none (the shape is too far from anything
  // measured to say).
  const GemmTableEntry* nearest(GemmForm form, std::uint64_t m, std::uint64_t n,
                                std::uint64_t k) const;
};

// Parses a table's text; `source` names it in errors, which are
// std::invalid_argument("SOURCE:LINE: what is wrong").
GemmTable parse_gemm_table(std::string_view text, const std::string& source);

// The table as text (what parse_gemm_table reads back).
std::string format_gemm_table(const GemmTable& table);

}  // namespace fp8c
