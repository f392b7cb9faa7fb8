// What one rank asked for in one collective: the part of a call that every
// rank must agree on. Backends compare these across ranks (NCCL does not,
// and a disagreement there is a hang or silent garbage).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "collectives/dtype.hpp"

namespace fp8c::collectives {

enum class CollectiveKind : std::uint8_t {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kBarrier,
  kRingShift,  // rank r's send lands in the recv of rank (r + 1) % size
};

// ring_shift's neighbours, for every backend: rank r sends to
// ring_next(r, size) and receives from ring_previous(r, size).
inline int ring_next(int rank, int size) {
  return (rank + 1) % size;
}
inline int ring_previous(int rank, int size) {
  return (rank + size - 1) % size;
}

// "all_gather", "reduce_scatter", ..., "ring_shift"
std::string_view collective_name(CollectiveKind kind);

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  ElemType dtype = ElemType::u8;
  ReduceOp op = ReduceOp::kSum;  // meaningful for reduce_scatter and all_reduce only
  // Elements per rank as NCCL counts them: all_gather's send count,
  // reduce_scatter's receive count, all_reduce's, broadcast's and
  // ring_shift's count (what each rank sends, and receives).
  std::size_t count = 0;
  int root = 0;                // meaningful for broadcast only
  std::uint64_t sequence = 0;  // 0 for the first collective on a communicator
};

// "all_reduce #3 (count=16, dtype=float32, op=sum)": names only the fields
// that matter for the kind.
std::string describe(const CollectiveCall& call);

// Whether two ranks' calls are the same collective: kind, sequence, count,
// dtype, and op or root where the kind uses them.
bool same_collective(const CollectiveCall& a, const CollectiveCall& b);

// The first rank whose call differs from rank 0's, or nothing if all agree.
std::optional<int> first_disagreeing_rank(std::span<const CollectiveCall> calls);

// The text shared by every rank when calls disagree, e.g. "rank 2 called
// reduce_scatter #3 (...) but rank 0 called all_reduce #3 (...); every rank
// must call the same collective with the same count, dtype and op".
std::string describe_disagreement(std::span<const CollectiveCall> calls, int disagreeing_rank);

}  // namespace fp8c::collectives
