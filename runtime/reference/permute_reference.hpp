// CPU reference of PermuteKernel, written to be obviously right: the input is
// `ranks` whole blocks of [outer][inner_local] elements, one per rank, as an
// all-gather lays them out; output row o is rank 0's row o, then rank 1's
// row o, ..., i.e. out[o][r * inner_local + i] = in[r][o][i].
#pragma once

#include <cstdint>
#include <vector>

namespace fp8c::runtime {

std::vector<std::uint8_t> reference_permute(const std::uint8_t* in, int element_bytes, int ranks,
                                            std::int64_t outer, std::int64_t inner_local);

}  // namespace fp8c::runtime
