// Which Fp8GemmKernel configuration runs a GEMM shape: kept apart from the
// kernel so the choice can change (or be measured) without touching the
// device code. A pure function of the shape and the GPU's SM count.
#pragma once

#include <cstdint>

#include "codegen/kernels/fp8_gemm.hpp"

namespace fp8c {

// What the heuristic needs to know of a GEMM; the operand formats and
// scalings are already fixed in `form` (its tile fields are ignored).
struct Fp8GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  Fp8GemmKernel form;
  // Clusters of two sharing B: no faster than single CTAs on the H100
  // (within 2% either way, per-tensor and block-scaled), so only when asked.
  bool clusters = false;
  // 0: the heuristic picks the tile width; else this one (tuning sweeps:
  // the runner's FP8C_GEMM_BLOCK_N). Must be a width fp8_gemm_problem()
  // accepts for the form.
  int block_n = 0;
  // The same for the tile height (the runner's FP8C_GEMM_BLOCK_M): 64, 128
  // or 256 where the form allows it.
  int block_m = 0;
};

struct Fp8GemmChoice {
  Fp8GemmKernel kernel;
  int tile_group = 8;  // tile rows (of clusters) walked before the next tile column
  int ctas = 0;        // persistent grid: min(tiles, SMs), a multiple of the cluster
};

// Tiles: block_m 64 when M fits one math warpgroup, else 128, or 256 for
// block scaling over 128x128 B blocks; block_n the width that, with that
// height, finishes in the fewest, fullest waves over `sms` SMs, wider
// tiles preferred (each loaded byte feeds more MMAs; up to 256 with fast
// accumulation, 160 promoted per-tensor, 128 block-scaled, 112 MXFP8, as measured or as registers
// allow); the ring as deep as shared memory allows (up to 8 stages); when `clusters`, clusters of
// two CTAs sharing B where there are at least two tile rows and pairing them wastes little (an even
// count, or 8 or more). Always a configuration that fp8_gemm_problem() accepts.
Fp8GemmChoice choose_fp8_gemm(const Fp8GemmShape& shape, int sms);

}  // namespace fp8c
