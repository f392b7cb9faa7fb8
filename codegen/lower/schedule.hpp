// The lowering's schedule of one pass over two compute streams: which steps
// run on a side stream beside the GEMMs, which steps each must wait for,
// and the order the executor issues them in. The results are those of the
// plan's order (every hazard between two steps is kept), so the CPU
// reference, which runs the plan's order, stays the oracle.
//
// Dependencies (LoweredStep::after): a step follows every earlier step
// (plan order) that writes what it reads (read after write), reads or
// writes what it writes (write after read, write after write). The
// executor's scratch buffers count as tensors each user writes (the dbias
// tile partials, dz staged in fp32), so two users of one are never at once
// on two streams. A GEMM's staging is the GEMMs' alone, and GEMMs all run
// on the main stream.
//
// The side stream takes a step that is no GEMM and no collective, when
// either
//   - some GEMM of the pass neither depends on it nor it on that GEMM: the
//     GEMM can run while it does (the dy cast beside a high-precision
//     wgrad, the columnwise cast of a saved input beside dgrad); or
//   - it depends on no GEMM, feeds one, and is not connected (through such
//     steps) to the pass's first one: an independent chain of preparation
//     (the weight's amax and cast beside the input's).
// Issue order: the first ready step in plan order, side steps before main
// ones (so that they start as early as they can), and among main steps
// those that wait for no side work before those that do (a GEMM that can
// start now goes before one that waits for a cast). Collectives keep the
// plan's order among themselves (all on one stream, main or comm), so every
// rank issues the same calls in the same order. A ring (overlap = ring,
// ring.hpp) is its GEMM's step: that step has the collective's hazards
// besides its own and takes the collective's place in that order; the
// collective's step, which issues nothing, has none.
#pragma once

#include <vector>

#include "codegen/lower/lowered.hpp"

namespace fp8c {

// Fills `lowered`'s after and on_side_stream, and returns the issue order
// (a permutation of the step indices). The comm-stream collectives keep
// their stream; with side = false nothing moves to the side stream and the
// order is the plan's.
std::vector<int> schedule_pass(const std::vector<Step>& steps, std::vector<LoweredStep>& lowered,
                               bool side);

}  // namespace fp8c
