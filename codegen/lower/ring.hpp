// overlap = ring: which collectives of a pass run as a ring of per-rank
// chunks pipelined with a GEMM's chunks, and the ring's arithmetic of who
// holds what at each step. Pure functions of the plan, so the lowering (which
// records the choice, lowered.hpp), the CPU reference executor and the GPU
// executor make the same choice and walk the same ring.
//
// Three forms, each a collective paired with the one GEMM next to it:
//   gather_rows   an all-gather along the rows (M) of the GEMM's A, read by
//                 that GEMM alone (fprop of a column layer, dgrad of a row
//                 layer under sequence parallelism): rank segment s arrives
//                 and the GEMM's rows of segment s run while the next
//                 segment travels.
//   gather_k      an all-gather along K of a GEMM that already reads its
//                 operand one rank segment at a time (a wgrad over tokens):
//                 each segment's accumulating call runs as it arrives.
//   scatter_rows  a reduce-scatter along the rows (M) of the GEMM's output,
//                 read by that collective alone (fprop of a row layer, dgrad
//                 of a column layer): the GEMM's rows of chunk c run, are
//                 added to the running sum that arrived from the previous
//                 rank and sent on; the last rank of each chunk's chain is
//                 its owner, which rounds the sum once into its output.
// Every step of a ring is one ring_shift (send to rank + 1, receive from
// rank - 1), so ranks - 1 shifts replace one collective.
//
// The sum (scatter_rows) keeps the reduce-scatter's arithmetic
// (collectives/reduce.hpp): partials as the GEMM stored them, widened,
// summed in fp32, rounded once; only the order differs: chunk c sums the
// partials of ranks c + 1, c + 2, ..., c (mod ranks). The running sums
// travel in fp32 (collectives/ring_sum.hpp).
//
// A pair that cannot be a ring runs as bulk, and why is returned: a
// block-scaled operand (its block scales are re-laid K-block-major over all
// its rows, so one rank's chunk of them is not contiguous; MXFP8 operands
// are dequantized whole before the GEMM), a gathered tensor another step
// also reads, a GEMM output another step reads before the sum, a GEMM that
// takes its FP8 output's amax (each chunk's call would set it over its own
// rows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

enum class RingForm { none, gather_rows, gather_k, scatter_rows };

struct Ring {
  RingForm form = RingForm::none;
  int collective = -1;  // step indices in the pass
  int gemm = -1;
};

struct RingChoice {
  std::vector<Ring> rings;
  // "fc1.dy.fp8.row's all_gather runs as bulk: ...", one per collective
  // that could have been a ring and is not.
  std::vector<std::string> bulk;
};

// The rings of one pass of `plan` (forward or backward), empty unless the
// layer's overlap is ring and it runs on more than one rank.
RingChoice choose_rings(const Layer& layer, const LayerPlan& plan, const std::vector<Step>& pass);

// The ring whose collective or GEMM is step `step`, or nullptr.
const Ring* ring_of(const std::vector<Ring>& rings, int step);

// gather_rows / gather_k: the rank segment this rank holds whole after
// `shifts` ring shifts (its own at 0); shift i sends segment
// gathered_segment(rank, ranks, i) and receives gathered_segment(..., i + 1).
int gathered_segment(int rank, int ranks, int shifts);

// scatter_rows: the output chunk this rank adds its partial to at step i
// (0 <= i < ranks); at the last step it is the rank's own.
int scattered_chunk(int rank, int ranks, int step);

std::string_view to_string(RingForm);

}  // namespace fp8c
