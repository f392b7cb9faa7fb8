#include "runtime/reference/transpose_reference.hpp"

namespace fp8c::runtime {

std::vector<std::uint8_t> reference_transpose(const std::uint8_t* in, std::int64_t rows,
                                              std::int64_t cols) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      out[static_cast<std::size_t>(c * rows + r)] = in[r * cols + c];
  return out;
}

}  // namespace fp8c::runtime
