// CPU reference of TransposeKernel: out[c][r] = in[r][c], elements of
// `element_bytes` bytes.
#pragma once

#include <cstdint>
#include <vector>

namespace fp8c::runtime {

std::vector<std::uint8_t> reference_transpose(const std::uint8_t* in, std::int64_t rows,
                                              std::int64_t cols, int element_bytes = 1);

}  // namespace fp8c::runtime
