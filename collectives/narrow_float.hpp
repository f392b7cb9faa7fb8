// bfloat16 and float16 <-> float32 conversions used by the reductions.
//
// Written out bit by bit (no compiler _Float16/__bf16) so the rounding is the
// same on every host compiler and easy to state: float32 -> 16-bit rounds to
// nearest, ties to even (RNE), overflows to infinity, and keeps NaN a quiet
// NaN of the same sign. 16-bit -> float32 is exact.
#pragma once

#include <cstdint>

namespace fp8c::collectives {

float bfloat16_to_float(std::uint16_t bits);
std::uint16_t float_to_bfloat16_rne(float value);

float float16_to_float(std::uint16_t bits);
std::uint16_t float_to_float16_rne(float value);

}  // namespace fp8c::collectives
