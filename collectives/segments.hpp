// Gathering or scattering along a dim that is not the outermost one.
//
// NCCL and gloo all-gather concatenate rank blocks along the OUTERMOST
// physical dim. Gathering any other dim d of a sharded tensor takes two
// steps: all-gather into segments[world][outer][local][inner], then move each
// rank's segment into its place along d:
//
//   out[o][w * local + l][i] = segments[w][o][l][i]            (segments_to_dim)
//
// where, for a per-rank shard of shape s[0..n) gathered along dim d:
// outer = s[0] * ... * s[d-1], local = s[d], inner = s[d+1] * ... * s[n-1].
// Skipping this step is the upstream TransformerEngine bug this project
// exists to prevent: a columnwise (transposed) sequence-parallel activation,
// sharded along its last dim, came back scrambled and wgrad was wrong.
// reduce_scatter along dim d needs the inverse BEFORE the collective
// (dim_to_segments), so that rank w's block is contiguous.
// When outer == 1 both are plain copies: keep the sharded dim outermost and
// the permute vanishes.
#pragma once

#include <cstddef>
#include <span>

namespace fp8c::collectives {

struct SegmentedShape {
  std::size_t world = 1;  // number of ranks (segments)
  std::size_t outer = 1;  // product of the dims before the gathered dim
  std::size_t local = 1;  // the gathered dim's extent on one rank
  std::size_t inner = 1;  // product of the dims after the gathered dim
};

// The SegmentedShape for gathering `dim` of a per-rank shard of shape
// `shard_shape` over `world` ranks. Throws std::invalid_argument if `dim` is
// not a dim of the shape.
SegmentedShape segmented_shape(std::span<const std::size_t> shard_shape, std::size_t dim,
                               std::size_t world);

// segments[world][outer][local][inner] -> out[outer][world * local][inner].
// Buffers must not overlap; elements are opaque bytes of `element_bytes`
// (FP8 data, its scales, any dtype).
void segments_to_dim(const void* segments, void* out, const SegmentedShape& shape,
                     std::size_t element_bytes);

// The inverse: in[outer][world * local][inner] -> segments[world][outer][local][inner].
void dim_to_segments(const void* in, void* segments, const SegmentedShape& shape,
                     std::size_t element_bytes);

}  // namespace fp8c::collectives
