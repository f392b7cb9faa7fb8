#include "runtime/reference/permute_reference.hpp"

#include <cstring>

namespace fp8c::runtime {

std::vector<std::uint8_t> reference_permute(const std::uint8_t* in, int element_bytes, int ranks,
                                            std::int64_t outer, std::int64_t inner_local) {
  const std::int64_t e = element_bytes;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(ranks * outer * inner_local * e));
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t r = 0; r < ranks; ++r)
      for (std::int64_t i = 0; i < inner_local; ++i) {
        const std::int64_t from = (r * outer + o) * inner_local + i;              // in[r][o][i]
        const std::int64_t to = o * (ranks * inner_local) + r * inner_local + i;  // out[o][r*n+i]
        std::memcpy(&out[static_cast<std::size_t>(to * e)], in + from * e,
                    static_cast<std::size_t>(e));
      }
  return out;
}

}  // namespace fp8c::runtime
