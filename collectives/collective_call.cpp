#include "collectives/collective_call.hpp"

namespace fp8c::collectives {

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kRingShift:
      return "ring_shift";
  }
  return "invalid-collective";
}

namespace {

bool uses_op(CollectiveKind kind) {
  return kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllReduce;
}

std::string_view count_label(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "send_count";
    case CollectiveKind::kReduceScatter:
      return "recv_count";
    default:
      return "count";
  }
}

}  // namespace

std::string describe(const CollectiveCall& call) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on
  // "literal" + std::string temporaries here.
  std::string text(collective_name(call.kind));
  text.append(" #").append(std::to_string(call.sequence));
  if (call.kind == CollectiveKind::kBarrier) return text;
  text.append(" (").append(count_label(call.kind)).append("=");
  text.append(std::to_string(call.count)).append(", dtype=").append(to_string(call.dtype));
  if (uses_op(call.kind)) text.append(", op=").append(reduce_op_name(call.op));
  if (call.kind == CollectiveKind::kBroadcast) {
    text.append(", root=").append(std::to_string(call.root));
  }
  text.append(")");
  return text;
}

bool same_collective(const CollectiveCall& a, const CollectiveCall& b) {
  if (a.kind != b.kind || a.sequence != b.sequence) return false;
  if (a.kind == CollectiveKind::kBarrier) return true;
  if (a.count != b.count || a.dtype != b.dtype) return false;
  if (uses_op(a.kind) && a.op != b.op) return false;
  if (a.kind == CollectiveKind::kBroadcast && a.root != b.root) return false;
  return true;
}

std::optional<int> first_disagreeing_rank(std::span<const CollectiveCall> calls) {
  for (std::size_t rank = 1; rank < calls.size(); ++rank) {
    if (!same_collective(calls[0], calls[rank])) return static_cast<int>(rank);
  }
  return std::nullopt;
}

std::string describe_disagreement(std::span<const CollectiveCall> calls, int disagreeing_rank) {
  return "rank " + std::to_string(disagreeing_rank) + " called " +
         describe(calls[static_cast<std::size_t>(disagreeing_rank)]) + " but rank 0 called " +
         describe(calls[0]) +
         "; every rank must call the same collective, in the same order, with the same count, "
         "dtype, op and root";
}

}  // namespace fp8c::collectives
