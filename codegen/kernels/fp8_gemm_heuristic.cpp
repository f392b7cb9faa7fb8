#include "codegen/kernels/fp8_gemm_heuristic.hpp"

#include <algorithm>
#include <initializer_list>

namespace fp8c {
namespace {

// Relative throughput of a math warpgroup at tile width n: narrower tiles
// reload A more often per MMA and spend more of each K block on barriers.
// Rough figures for ranking only; the benchmark measures the real ones.
double width_efficiency(int n) {
  if (n >= 256) return 1.0;
  if (n >= 192) return 0.97;
  if (n >= 128) return 0.93;
  if (n >= 96) return 0.85;
  return 0.72;
}

// The same for per-tensor promotion, which adds a promotion per 128 K that
// a wider tile amortizes over more MMAs: measured on the H200 (8192^3 and
// 4096 x 7168 x 16384), 160 wide runs 6-10% faster than 128 despite its
// worse wave fit, 144 about 3%.
double promoted_width_efficiency(int n) {
  if (n >= 160) return 1.0;
  if (n >= 144) return 0.96;
  if (n >= 128) return 0.92;
  if (n >= 96) return 0.85;
  return 0.72;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

Fp8GemmChoice choose_fp8_gemm(const Fp8GemmShape& shape, int sms) {
  sms = std::max(sms, 1);
  Fp8GemmKernel k = shape.form;
  k.block_m = shape.m <= 64 ? 64 : 128;

  // Promotion doubles the accumulators, which caps the width (fp8_gemm.hpp).
  // Block-scaled tiles wider than 128 straddle 128x128 B blocks and keep a
  // scale per column: measured 0.48x of the 128-wide tile's speed at 144.
  const std::initializer_list<int> fast_widths = {256, 192, 128, 96, 64};
  const std::initializer_list<int> promoted_widths = {160, 144, 128, 96, 64};
  const std::initializer_list<int> block_widths = {128, 96, 64};
  // MXFP8 promotes every 32 K: the widths that compile without spills.
  const std::initializer_list<int> mx_widths = {112, 80, 64};
  const bool promoted = k.promotes() && !k.block_scaled();
  // 256-row tiles (two 64-row waves per math warpgroup) for block scaling
  // over a 128x128 B: each K block's barrier wait and scale reads serve two
  // waves, measured 1.10-1.12x the 128-row tile's speed on the H100 at
  // 8192^3 and 4096 x 7168 x 16384. Per-tensor they measured no faster than
  // 128 x 160 (promoted) or 128 x 256 (fast), so they are not picked there.
  const bool tall = k.block_scaled() && k.b_scale_rows == 128 && shape.m > 128;
  // An explicit height (tuning) is the only candidate, the width chosen for
  // it; where it fits no width, it stays, and fp8_gemm_problem() says why.
  const int first = shape.block_m > 0 ? shape.block_m : k.block_m;
  const int second = shape.block_m > 0 || !tall ? 0 : 256;
  double best_time = 0;
  int best_m = first, best_n = 64;
  for (int m : {first, second}) {
    if (m == 0) continue;
    const std::int64_t tiles_m = ceil_div(std::max<std::int64_t>(shape.m, 1), m);
    for (int n : k.mx               ? mx_widths
                 : k.block_scaled() ? block_widths
                 : promoted         ? promoted_widths
                                    : fast_widths) {
      k.block_m = m;
      k.block_n = n;
      k.stages = 2;  // the ring is sized below; here only the tile must fit
      if (!fp8_gemm_problem(k).empty()) continue;
      const std::int64_t tiles = tiles_m * ceil_div(std::max<std::int64_t>(shape.n, 1), n);
      const std::int64_t waves = ceil_div(tiles, sms);
      // A wave costs a tile's time, proportional to its area over its
      // efficiency.
      const double efficiency =
          (promoted ? promoted_width_efficiency(n) : width_efficiency(n)) * (m == 256 ? 1.1 : 1.0);
      const double time = static_cast<double>(waves) * m * n / efficiency;
      if (best_time == 0 || time < best_time * 0.999) {
        best_time = time;
        best_m = m;
        best_n = n;
      }
    }
  }
  k.block_m = best_m;
  k.block_n = shape.block_n > 0 ? shape.block_n : best_n;
  const std::int64_t tiles_m = ceil_div(std::max<std::int64_t>(shape.m, 1), k.block_m);
  k.stages = deepest_ring(k);

  // Pairs of tile rows share B through a cluster of two; an odd last pair
  // computes a tile of zeros below M.
  if (shape.clusters && k.block_m >= 128 && tiles_m >= 2 && (tiles_m % 2 == 0 || tiles_m >= 8)) {
    k.cluster_m = 2;
    k.stages = deepest_ring(k, k.stages);
  }

  Fp8GemmChoice choice;
  choice.kernel = k;
  const std::int64_t rows = ceil_div(tiles_m, k.cluster_m);  // of clusters
  const std::int64_t tiles =
      rows * ceil_div(std::max<std::int64_t>(shape.n, 1), static_cast<std::int64_t>(k.block_n));
  choice.ctas = static_cast<int>(std::min<std::int64_t>(tiles, sms / k.cluster_m)) * k.cluster_m;
  choice.tile_group = static_cast<int>(std::min<std::int64_t>(rows, 8 / k.cluster_m));
  return choice;
}

}  // namespace fp8c
