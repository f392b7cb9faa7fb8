#include "collectives/call_check.hpp"

#include <cstddef>
#include <limits>
#include <string>
#include <utility>

#include "collectives/collective_error.hpp"

namespace fp8c::collectives {
namespace {

// Counts are size_t, as in NCCL; byte sizes and addresses are 64-bit.
static_assert(sizeof(std::size_t) == sizeof(BufferAddress));

class Check {
 public:
  Check(const CollectiveCall& call, int rank, int size) : call_(call), rank_(rank), size_(size) {}

  [[noreturn]] void fail(const std::string& detail) const {
    throw CollectiveError(FailureKind::kInvalidArgument, describe(call_), rank_, size_, detail);
  }

  // Bytes of one rank's block; refuses invalid enums and sizes that overflow
  // (the largest buffer is size blocks).
  std::uint64_t block_bytes() const {
    if (!is_valid_elem_type(static_cast<std::uint8_t>(call_.dtype))) fail("invalid dtype value");
    if (!is_valid_reduce_op(static_cast<std::uint8_t>(call_.op))) fail("invalid reduction op");
    const std::uint64_t element = element_bytes(call_.dtype);
    const std::uint64_t limit =
        std::numeric_limits<std::uint64_t>::max() / (element * static_cast<std::uint64_t>(size_));
    if (call_.count > limit) fail("count " + std::to_string(call_.count) + " overflows size_t");
    return call_.count * element;
  }

  void require_buffer(BufferAddress pointer, std::uint64_t bytes, const char* name) const {
    if (call_.count == 0) return;
    if (pointer == 0) fail(std::string(name) + " is null");
    if (pointer > std::numeric_limits<BufferAddress>::max() - bytes)
      fail(std::string(name) + " runs past the end of the address space");
  }

  void require_reducible() const {
    if (is_reducible(call_.dtype)) return;
    fail("reduction on " + std::string(to_string(call_.dtype)) +
         " is refused: FP8 tensors are only gathered or broadcast; reduce in fp32 or "
         "bf16 and quantize afterwards");
  }

  // [a, a + a_bytes) and [b, b + b_bytes) may only overlap when a_at == b_at
  // (NCCL's in-place address): any other overlap would read half-overwritten
  // data.
  void require_no_partial_overlap(BufferAddress a, std::uint64_t a_bytes, BufferAddress b,
                                  std::uint64_t b_bytes, BufferAddress a_at, BufferAddress b_at,
                                  const char* in_place_rule) const {
    if (call_.count == 0) return;
    const bool overlap = a < b + b_bytes && b < a + a_bytes;
    if (!overlap || a_at == b_at) return;
    fail(std::string("send and recv overlap but not in place; in place means ") + in_place_rule);
  }

  // For collectives without an in-place form: [a, a + bytes) and
  // [b, b + bytes) must not overlap at all.
  void require_disjoint(BufferAddress a, BufferAddress b, std::uint64_t bytes,
                        const char* reason) const {
    if (call_.count == 0) return;
    if (a < b + bytes && b < a + bytes)
      fail("send and recv overlap; " + std::string(collective_name(call_.kind)) +
           " has no in-place form (" + reason + ")");
  }

 private:
  const CollectiveCall& call_;
  int rank_;
  int size_;
};

}  // namespace

void check_call_arguments(const CollectiveCall& call, int rank, int size, BufferAddress send,
                          BufferAddress recv) {
  const Check check(call, rank, size);
  const std::uint64_t bytes = check.block_bytes();
  const std::uint64_t all_bytes = bytes * static_cast<std::uint64_t>(size);
  const std::uint64_t my_block = bytes * static_cast<std::uint64_t>(rank);
  switch (call.kind) {
    case CollectiveKind::kAllGather:
      check.require_buffer(send, bytes, "send");
      check.require_buffer(recv, all_bytes, "recv");
      check.require_no_partial_overlap(send, bytes, recv, all_bytes, send, recv + my_block,
                                       "send == recv + rank * send_count");
      return;
    case CollectiveKind::kReduceScatter:
      check.require_reducible();
      check.require_buffer(send, all_bytes, "send");
      check.require_buffer(recv, bytes, "recv");
      check.require_no_partial_overlap(send, all_bytes, recv, bytes, send + my_block, recv,
                                       "recv == send + rank * recv_count");
      return;
    case CollectiveKind::kAllReduce:
      check.require_reducible();
      check.require_buffer(send, bytes, "send");
      check.require_buffer(recv, bytes, "recv");
      check.require_no_partial_overlap(send, bytes, recv, bytes, send, recv, "send == recv");
      return;
    case CollectiveKind::kBroadcast:
      if (call.root < 0 || call.root >= size) {
        check.fail("root " + std::to_string(call.root) + " is not a rank of this group of " +
                   std::to_string(size));
      }
      if (rank == call.root) {
        check.require_buffer(send, bytes, "send (on the root)");
        check.require_no_partial_overlap(send, bytes, recv, bytes, send, recv, "send == recv");
      }
      check.require_buffer(recv, bytes, "recv");
      return;
    case CollectiveKind::kRingShift:
      check.require_buffer(send, bytes, "send");
      check.require_buffer(recv, bytes, "recv");
      check.require_disjoint(send, recv, bytes,
                             "a rank's recv may be written while its send is still read");
      return;
    case CollectiveKind::kBarrier:
      return;
  }
  check.fail("invalid collective kind");
}

void check_element_alignment(const CollectiveCall& call, int rank, int size, BufferAddress send,
                             BufferAddress recv) {
  const std::uint64_t element = element_bytes(call.dtype);
  if (element <= 1 || call.count == 0) return;
  const bool send_read = call.kind != CollectiveKind::kBroadcast || rank == call.root;
  for (const auto& [pointer, name] :
       {std::pair<BufferAddress, const char*>{send_read ? send : 0, "send"}, {recv, "recv"}}) {
    if (pointer % element != 0) {
      Check(call, rank, size)
          .fail(std::string(name) + " is not aligned to its " + std::to_string(element) +
                "-byte elements");
    }
  }
}

}  // namespace fp8c::collectives
