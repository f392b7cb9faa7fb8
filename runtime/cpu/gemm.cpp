#include "runtime/cpu/gemm.hpp"

#include <algorithm>
#include <vector>

#include "runtime/cpu/parallel_for.hpp"

namespace fp8c::cpu {
namespace {

// Block sizes: a panel of B (kBlockK x kBlockN floats, 64 KiB) stays in L2
// while every row of A streams over it.
constexpr std::size_t kBlockN = 128;
constexpr std::size_t kBlockK = 128;
constexpr std::size_t kBlockM = 64;

}  // namespace

void gemm_nt(std::size_t m, std::size_t n, std::size_t k, std::span<const float> a,
             std::span<const float> b, std::span<float> c) {
  std::fill(c.begin(), c.end(), 0.0f);
  // Threads take disjoint column blocks of C: each c[i][j] is still summed
  // by one thread, over k in order.
  const std::size_t blocks = (n + kBlockN - 1) / kBlockN;
  const std::size_t grain = std::max<std::size_t>(1, (1u << 22) / std::max<std::size_t>(1, m * k));
  parallel_for(blocks, grain, [&](std::size_t first, std::size_t last) {
    // B transposed into K-major panels bt[k][n]: the inner loop then runs
    // over contiguous n and vectorises.
    std::vector<float> panel(kBlockK * kBlockN);
    for (std::size_t j0 = first * kBlockN; j0 < std::min(n, last * kBlockN); j0 += kBlockN) {
      const std::size_t nb = std::min(kBlockN, n - j0);
      for (std::size_t k0 = 0; k0 < k; k0 += kBlockK) {
        const std::size_t kb = std::min(kBlockK, k - k0);
        for (std::size_t j = 0; j < nb; ++j)
          for (std::size_t kk = 0; kk < kb; ++kk)
            panel[kk * kBlockN + j] = b[(j0 + j) * k + k0 + kk];
        for (std::size_t i0 = 0; i0 < m; i0 += kBlockM) {
          const std::size_t mb = std::min(kBlockM, m - i0);
          for (std::size_t i = i0; i < i0 + mb; ++i) {
            float* __restrict crow = c.data() + i * n + j0;
            const float* arow = a.data() + i * k + k0;
            for (std::size_t kk = 0; kk < kb; ++kk) {
              const float av = arow[kk];
              const float* __restrict prow = panel.data() + kk * kBlockN;
              for (std::size_t j = 0; j < nb; ++j) crow[j] += av * prow[j];
            }
          }
        }
      }
    }
  });
}

}  // namespace fp8c::cpu
