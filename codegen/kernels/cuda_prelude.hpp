// Device helpers every generated CUDA kernel starts with: fixed-width types,
// high-precision loads, FP8 conversions in inline PTX, amax as float bits.
// Self-contained on purpose: no #include, so NVRTC parses a few hundred lines
// instead of cuda_fp16.h and friends, and compiles in milliseconds.
#pragma once

#include <string>

#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

// The prelude's text, with the conversions `format` needs.
std::string cuda_prelude();

// Eight consecutive elements of a row (16-byte aligned), as loaded (`raw8`,
// `load_raw`) and as floats (`decode`). Needs `in_t`, and WIDE defined to
// true for fp32 input (two float4) or false for 16-bit input (one uint4).
std::string cuda_row_loads();

// `store_streaming` of 8 and 4 FP8 bytes: st.global.cs, so outputs written
// once do not push the inputs out of L2.
std::string cuda_streaming_stores();

// "true" / "false", for the #defines the printers emit.
const char* cuda_bool(bool b);

// A scaling's short tag in kernel names: "tensor", "b1x128", "b128x128",
// "mx1x32".
std::string scaling_tag(Scaling scaling);

// Name of the device type for a high-precision element ("bf16_t", ...).
std::string cuda_storage_type(ElemType type);

// Name of the device function that converts a pair of floats to packed FP8
// ("pack_e4m3x2"): low byte from the first argument. `format` is e4m3 or
// e5m2 (else std::invalid_argument).
std::string cuda_pack_function(ElemType format);

}  // namespace fp8c
