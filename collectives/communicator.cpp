#include "collectives/communicator.hpp"

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>

namespace fp8c::collectives {
namespace {

// Address range arithmetic on unrelated buffers goes through uintptr_t:
// comparing pointers into different objects is unspecified in C++.
struct ByteRange {
  std::uintptr_t begin;
  std::uintptr_t end;
};

ByteRange range_of(const void* pointer, std::size_t bytes) {
  const auto begin = reinterpret_cast<std::uintptr_t>(pointer);
  return {begin, begin + bytes};
}

bool overlap(ByteRange a, ByteRange b) {
  return a.begin < b.end && b.begin < a.end;
}

std::uintptr_t address(const void* pointer, std::size_t byte_offset = 0) {
  return reinterpret_cast<std::uintptr_t>(pointer) + byte_offset;
}

}  // namespace

Communicator::Communicator(int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout) {
  if (size < 1) throw std::invalid_argument("fp8c collectives: a group needs at least one rank");
  if (rank < 0 || rank >= size) {
    throw std::invalid_argument("fp8c collectives: rank " + std::to_string(rank) +
                                " is out of range for a group of " + std::to_string(size));
  }
  if (timeout.count() <= 0) {
    throw std::invalid_argument("fp8c collectives: the collective timeout must be positive");
  }
}

Communicator::~Communicator() = default;

CollectiveError Communicator::error(FailureKind kind, const CollectiveCall& call,
                                    std::string detail) const {
  return CollectiveError(kind, describe(call), rank_, size_, std::move(detail));
}

std::chrono::steady_clock::time_point Communicator::deadline_from_now() const {
  return std::chrono::steady_clock::now() + timeout_;
}

void Communicator::poison(const std::string& reason) noexcept {
  if (poisoned_) return;
  poisoned_ = true;
  try {
    poison_reason_ = reason;
  } catch (...) {
    // Out of memory for the text: the flag is what matters.
  }
  release_peers(poison_reason_);
}

void Communicator::abort(const std::string& reason) noexcept {
  try {
    poison("communicator aborted: " + reason);
  } catch (...) {
    poison("communicator aborted");
  }
}

void Communicator::guarded(const CollectiveCall& call, const std::function<void()>& body) {
  if (poisoned_) {
    throw error(FailureKind::kPoisoned, call,
                "refused: this communicator was poisoned by an earlier error: " + poison_reason_);
  }
  try {
    body();
  } catch (const CollectiveError& failure) {
    poison(failure.what());
    throw;
  } catch (const std::exception& failure) {
    CollectiveError wrapped =
        error(FailureKind::kTransport, call, std::string("unexpected error: ") + failure.what());
    poison(wrapped.what());
    throw wrapped;
  }
}

namespace {

// Checks every backend relies on, shared so all backends refuse the same
// calls with the same words.
class ArgumentCheck {
 public:
  ArgumentCheck(const Communicator& comm, const CollectiveCall& call) : comm_(comm), call_(call) {}

  // Returns bytes per rank block; refuses invalid enums and sizes that overflow.
  std::size_t block_bytes() const {
    if (!is_valid_elem_type(static_cast<std::uint8_t>(call_.dtype))) fail("invalid dtype value");
    if (!is_valid_reduce_op(static_cast<std::uint8_t>(call_.op))) fail("invalid reduction op");
    const std::size_t element = element_bytes(call_.dtype);
    const std::size_t limit = std::numeric_limits<std::size_t>::max() /
                              (element * static_cast<std::size_t>(comm_.size()));
    if (call_.count > limit) fail("count " + std::to_string(call_.count) + " overflows size_t");
    return call_.count * element;
  }

  void require_buffer(const void* pointer, std::string_view name) const {
    if (call_.count > 0 && pointer == nullptr) fail(std::string(name) + " is null");
  }

  void require_reducible() const {
    if (is_reducible(call_.dtype)) return;
    fail("reduction on " + std::string(to_string(call_.dtype)) +
         " is refused: FP8 tensors are only gathered or broadcast; reduce in fp32 or "
         "bf16 and quantize afterwards");
  }

  // Any overlap of `a` and `b` other than the exact in-place address NCCL
  // defines is a caller bug that would read half-overwritten data.
  void require_no_partial_overlap(ByteRange a, ByteRange b, std::uintptr_t in_place_a,
                                  std::uintptr_t in_place_b, std::string_view in_place_rule) const {
    if (call_.count == 0 || !overlap(a, b)) return;
    if (in_place_a == in_place_b) return;
    fail("send and recv overlap but not in place; in place means " + std::string(in_place_rule));
  }

  [[noreturn]] void fail(const std::string& detail) const {
    throw CollectiveError(FailureKind::kInvalidArgument, describe(call_), comm_.rank(),
                          comm_.size(), detail);
  }

 private:
  const Communicator& comm_;
  const CollectiveCall& call_;
};

}  // namespace

void Communicator::all_gather(const void* send, void* recv, std::size_t send_count,
                              ElemType dtype) {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kAllGather, send_count, dtype, ReduceOp::kSum, 0);
  guarded(call, [&] {
    const ArgumentCheck check(*this, call);
    const std::size_t bytes = check.block_bytes();
    check.require_buffer(send, "send");
    check.require_buffer(recv, "recv");
    check.require_no_partial_overlap(range_of(send, bytes), range_of(recv, bytes * size_),
                                     address(send), address(recv, bytes * rank_),
                                     "send == recv + rank * send_count");
    run_all_gather(call, send, recv);
  });
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                  ElemType dtype, ReduceOp op) {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kReduceScatter, recv_count, dtype, op, 0);
  guarded(call, [&] {
    const ArgumentCheck check(*this, call);
    const std::size_t bytes = check.block_bytes();
    check.require_reducible();
    check.require_buffer(send, "send");
    check.require_buffer(recv, "recv");
    check.require_no_partial_overlap(range_of(send, bytes * size_), range_of(recv, bytes),
                                     address(send, bytes * rank_), address(recv),
                                     "recv == send + rank * recv_count");
    run_reduce_scatter(call, send, recv);
  });
}

void Communicator::all_reduce(const void* send, void* recv, std::size_t count, ElemType dtype,
                              ReduceOp op) {
  const CollectiveCall call = sequence_.next(CollectiveKind::kAllReduce, count, dtype, op, 0);
  guarded(call, [&] {
    const ArgumentCheck check(*this, call);
    const std::size_t bytes = check.block_bytes();
    check.require_reducible();
    check.require_buffer(send, "send");
    check.require_buffer(recv, "recv");
    check.require_no_partial_overlap(range_of(send, bytes), range_of(recv, bytes), address(send),
                                     address(recv), "send == recv");
    run_all_reduce(call, send, recv);
  });
}

void Communicator::broadcast(const void* send, void* recv, std::size_t count, ElemType dtype,
                             int root) {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kBroadcast, count, dtype, ReduceOp::kSum, root);
  guarded(call, [&] {
    const ArgumentCheck check(*this, call);
    const std::size_t bytes = check.block_bytes();
    if (root < 0 || root >= size_) {
      check.fail("root " + std::to_string(root) + " is not a rank of this group of " +
                 std::to_string(size_));
    }
    if (rank_ == root) {
      check.require_buffer(send, "send (on the root)");
      check.require_no_partial_overlap(range_of(send, bytes), range_of(recv, bytes), address(send),
                                       address(recv), "send == recv");
    }
    check.require_buffer(recv, "recv");
    run_broadcast(call, send, recv);
  });
}

void Communicator::barrier() {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kBarrier, 0, ElemType::u8, ReduceOp::kSum, 0);
  guarded(call, [&] { run_barrier(call); });
}

}  // namespace fp8c::collectives
