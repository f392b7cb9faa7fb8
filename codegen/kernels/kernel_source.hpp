// A generated kernel as the JIT receives it. Generators in codegen/ produce
// these as pure data; runtime/jit compiles them.
#pragma once

#include <string>
#include <vector>

namespace fp8c {

struct KernelSource {
  std::string name;                  // unique within a program, e.g. "cast_bf16_e4m3_rc_amax"
  std::string entry;                 // the __global__ function's name
  std::string source;                // self-contained CUDA C++ (no #include)
  std::vector<std::string> options;  // extra NVRTC options
};

}  // namespace fp8c
