// Where the runtime finds the measured-GEMM table that `gemm = auto`
// consults (codegen/lower/gemm_table.hpp), and reading it from a file.
#pragma once

#include <memory>
#include <string>

#include "codegen/lower/gemm_table.hpp"
#include "codegen/lower/lowered.hpp"

namespace fp8c::runtime {

// The table in `path`. Throws std::runtime_error naming the file where it
// cannot be read, std::invalid_argument ("PATH:LINE: ...") where it is not
// a valid table.
std::shared_ptr<const GemmTable> read_gemm_table(const std::string& path);

// The table path for this process: FP8C_GEMM_TABLE where set (empty or
// "none": no table), else gemm_table.txt in the cubin cache directory
// (runtime/cubin_cache.hpp) where that file exists; "" for none.
std::string gemm_table_path();

// Sets o.gemm_table from gemm_table_path(), for a GPU named `gpu`: a table
// measured on another GPU is not used, and o.gemm_table_note says so. A
// table that cannot be read or parsed throws as read_gemm_table does
// (a chosen table that is silently ignored would leave `auto` on a rule
// the user meant to replace).
void attach_gemm_table(LowerOptions& o, const std::string& gpu);

}  // namespace fp8c::runtime
