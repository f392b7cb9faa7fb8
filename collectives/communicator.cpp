#include "collectives/communicator.hpp"

#include <cstdint>
#include <stdexcept>
#include <utility>

#include "collectives/call_check.hpp"

namespace fp8c::collectives {
namespace {

// Address arithmetic on unrelated buffers goes through uintptr_t: comparing
// pointers into different objects is unspecified in C++.
BufferAddress address(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer);
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

void Communicator::all_gather(const void* send, void* recv, std::size_t send_count,
                              ElemType dtype) {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kAllGather, send_count, dtype, ReduceOp::kSum, 0);
  guarded(call, [&] {
    check_call_arguments(call, rank_, size_, address(send), address(recv));
    run_all_gather(call, send, recv);
  });
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                  ElemType dtype, ReduceOp op) {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kReduceScatter, recv_count, dtype, op, 0);
  guarded(call, [&] {
    check_call_arguments(call, rank_, size_, address(send), address(recv));
    run_reduce_scatter(call, send, recv);
  });
}

void Communicator::all_reduce(const void* send, void* recv, std::size_t count, ElemType dtype,
                              ReduceOp op) {
  const CollectiveCall call = sequence_.next(CollectiveKind::kAllReduce, count, dtype, op, 0);
  guarded(call, [&] {
    check_call_arguments(call, rank_, size_, address(send), address(recv));
    run_all_reduce(call, send, recv);
  });
}

void Communicator::broadcast(const void* send, void* recv, std::size_t count, ElemType dtype,
                             int root) {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kBroadcast, count, dtype, ReduceOp::kSum, root);
  guarded(call, [&] {
    check_call_arguments(call, rank_, size_, address(send), address(recv));
    run_broadcast(call, send, recv);
  });
}

void Communicator::ring_shift(const void* send, void* recv, std::size_t count, ElemType dtype) {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kRingShift, count, dtype, ReduceOp::kSum, 0);
  guarded(call, [&] {
    check_call_arguments(call, rank_, size_, address(send), address(recv));
    run_ring_shift(call, send, recv);
  });
}

void Communicator::barrier() {
  const CollectiveCall call =
      sequence_.next(CollectiveKind::kBarrier, 0, ElemType::u8, ReduceOp::kSum, 0);
  guarded(call, [&] { run_barrier(call); });
}

}  // namespace fp8c::collectives
