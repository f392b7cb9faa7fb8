// The fp32 GEMM of the CPU reference executor: C[m][n] = sum_k A[m][k] * B[n][k]
// (both operands K-major, like Hopper's TN FP8 GEMMs). Each C element is
// accumulated in one fp32 register in increasing k order, whatever the
// blocking and whatever rows/columns a rank owns, so an N-rank run and a
// 1-rank run that own the same output element compute it bit for bit alike.
#pragma once

#include <cstddef>
#include <span>

namespace fp8c::cpu {

// a: [m][k], b: [n][k], c: [m][n]; all row-major and contiguous. C is
// overwritten.
void gemm_nt(std::size_t m, std::size_t n, std::size_t k, std::span<const float> a,
             std::span<const float> b, std::span<float> c);

}  // namespace fp8c::cpu
