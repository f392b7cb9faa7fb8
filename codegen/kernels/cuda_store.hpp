// Device helpers the epilogue and dequantize printers share: fp32 values
// stored as high-precision elements, one or two at a time, rounded to
// nearest even, every NaN canonical (0x7FFFFFFF for fp32, 0x7FFF for bf16 and
// fp16; codegen/numerics' float_to_bf16 / float_to_fp16 rules). Canonical
// by construction, so a result never depends on which NaN payload an
// instruction happens to propagate, and the CPU references can be bit-exact.
#pragma once

#include <string>

namespace fp8c {

// Text to print after cuda_prelude(): canonical(), to_bits(float, T()),
// pack2(lo, hi, T()) (lo in the low half) and store_element(T*, float).
std::string cuda_store_functions();

}  // namespace fp8c
