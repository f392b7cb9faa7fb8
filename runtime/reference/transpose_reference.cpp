#include "runtime/reference/transpose_reference.hpp"

#include <cstring>

namespace fp8c::runtime {

std::vector<std::uint8_t> reference_transpose(const std::uint8_t* in, std::int64_t rows,
                                              std::int64_t cols, int element_bytes) {
  const auto e = static_cast<std::size_t>(element_bytes);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * cols) * e);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      std::memcpy(&out[static_cast<std::size_t>(c * rows + r) * e],
                  in + static_cast<std::size_t>(r * cols + c) * e, e);
  return out;
}

}  // namespace fp8c::runtime
