// A generated kernel as the JIT receives it. Generators in codegen/ produce
// these as pure data; runtime/jit compiles them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/ir/ir.hpp"

namespace fp8c {

// What `source` is written in: CUDA C++ for NVRTC, or PTX (an LLVM-built
// kernel, as `fp8c emit --backend llvm` shows it) for the PTX assembler.
enum class SourceLanguage { cuda, ptx };

struct KernelSource {
  std::string name;                  // unique within a program, e.g. "cast_bf16_e4m3_rc_amax"
  std::string entry;                 // the __global__ function's name
  std::string source;                // self-contained (no #include), in `language`
  std::vector<std::string> options;  // extra NVRTC options
  SourceLanguage language = SourceLanguage::cuda;
  // The kernel IR `source` was printed from, for the kinds built as IR
  // (codegen/ir); null for the kinds still written as CUDA text. The LLVM
  // backend lowers this, not the text.
  std::shared_ptr<const ir::Kernel> ir = nullptr;
};

}  // namespace fp8c
