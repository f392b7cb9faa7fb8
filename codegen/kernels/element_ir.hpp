// Element encodings the kernels built as IR share: reading a stored
// high-precision element, packing FP8 codes, testing a pointer's alignment.
#pragma once

#include <vector>

#include "codegen/ir/builder.hpp"
#include "fp8c/elem_type.hpp"

namespace fp8c {

// One stored bf16 / fp16 / fp32 element (its 16 bits, or the f32 itself)
// as f32, exactly.
ir::Expr element_value(ElemType type, ir::Expr raw);

// The two bf16 / fp16 elements of a u32 word (low half first) as f32,
// exactly.
std::vector<ir::Expr> word_values(ElemType type, ir::Expr w);

// Two values as FP8 codes of `format` (e4m3 or e5m2), `lo` in the low byte,
// as the low half of a u32 (nearest even, saturating as the format's cvt does).
ir::Expr fp8_pair(ElemType format, ir::Expr lo, ir::Expr hi);

// Whether `pointer` is a multiple of `bytes` (a power of two): the test a
// kernel makes before its vector loads or stores.
ir::Expr aligned(ir::Expr pointer, int bytes);

}  // namespace fp8c
