#include "collectives/segments.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace fp8c::collectives {

SegmentedShape segmented_shape(std::span<const std::size_t> shard_shape, std::size_t dim,
                               std::size_t world) {
  if (dim >= shard_shape.size()) {
    throw std::invalid_argument("segmented_shape: dim " + std::to_string(dim) +
                                " is not a dim of a rank-" + std::to_string(shard_shape.size()) +
                                " shape");
  }
  SegmentedShape shape;
  shape.world = world;
  for (std::size_t d = 0; d < dim; ++d) shape.outer *= shard_shape[d];
  shape.local = shard_shape[dim];
  for (std::size_t d = dim + 1; d < shard_shape.size(); ++d) shape.inner *= shard_shape[d];
  return shape;
}

namespace {

// Copies runs of `local * inner` elements, the largest contiguous pieces the
// two layouts share. `to_dim` picks the direction.
void move_segments(const std::byte* from, std::byte* to, const SegmentedShape& shape,
                   std::size_t element_bytes, bool to_dim) {
  const std::size_t run = shape.local * shape.inner * element_bytes;
  if (run == 0) return;
  for (std::size_t w = 0; w < shape.world; ++w) {
    for (std::size_t o = 0; o < shape.outer; ++o) {
      const std::size_t segment_offset = (w * shape.outer + o) * run;
      const std::size_t dim_offset = (o * shape.world + w) * run;
      if (to_dim) {
        std::memcpy(to + dim_offset, from + segment_offset, run);
      } else {
        std::memcpy(to + segment_offset, from + dim_offset, run);
      }
    }
  }
}

}  // namespace

void segments_to_dim(const void* segments, void* out, const SegmentedShape& shape,
                     std::size_t element_bytes) {
  move_segments(static_cast<const std::byte*>(segments), static_cast<std::byte*>(out), shape,
                element_bytes, true);
}

void dim_to_segments(const void* in, void* segments, const SegmentedShape& shape,
                     std::size_t element_bytes) {
  move_segments(static_cast<const std::byte*>(in), static_cast<std::byte*>(segments), shape,
                element_bytes, false);
}

}  // namespace fp8c::collectives
