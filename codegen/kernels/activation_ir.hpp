// The activations and their derivatives as kernel IR expressions, for every
// kernel built as IR that applies one (the quantize family's dact, the
// epilogue, the block quantizer's dz). One definition, so that two kernels
// computing act'(z) give the same bits, and both backends too: the IR fixes
// every rounding (codegen/ir/ir.hpp), so the FMAs here are written out.
//
// The formulas are runtime/cpu/activation.hpp's in fp32, with the fast
// instructions a memory-bound kernel can afford: tanh.approx for GELU's
// tanh, ex2.approx (of x * log2 e) and div.approx for SiLU's exponential
// and division. runtime/reference/activation_bound.hpp bounds their error
// against the CPU's formulas; ReLU and none are exact.
#pragma once

#include "codegen/ir/builder.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

// act(z), an f32 expression (z: f32). Locals it needs are declared in `b`'s
// current block.
ir::Expr activation_ir(ir::Builder& b, Activation act, ir::Expr z);

// act'(z), the derivative at the saved pre-activation z.
ir::Expr activation_grad_ir(ir::Builder& b, Activation act, ir::Expr z);

}  // namespace fp8c
