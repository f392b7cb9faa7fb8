// CPU reference of TransposeKernel: out[c][r] = in[r][c], bytes.
#pragma once

#include <cstdint>
#include <vector>

namespace fp8c::runtime {

std::vector<std::uint8_t> reference_transpose(const std::uint8_t* in, std::int64_t rows,
                                              std::int64_t cols);

}  // namespace fp8c::runtime
