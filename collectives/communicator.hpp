// One rank's handle on a group of ranks, with NCCL's collective semantics
// over raw buffers (host memory for the CPU backends; the same signatures fit
// device pointers for the NCCL and single-GPU multi-rank backends).
//
// Contract shared by every backend:
// - Every rank calls the same collectives in the same order with the same
//   count, dtype, op and root. Backends check this where they can (the CPU
//   backends always do; NCCL cannot) and fail with FailureKind::kMismatch on
//   every rank rather than hang or corrupt memory.
// - Every collective is bounded by timeout(): a rank that never arrives makes
//   the waiting ranks throw CollectiveError (kTimeout) instead of hanging.
// - Any error poisons the communicator: it throws the CollectiveError, marks
//   itself failed, and releases the other ranks (they throw kPeerFailed or
//   their own kTimeout). Every later call throws kPoisoned at once, because
//   after a failure the ranks no longer agree on where they are in the
//   sequence of collectives.
// - One thread drives one Communicator at a time, as with an NCCL
//   communicator per rank; different ranks' communicators run concurrently.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "collectives/call_sequence.hpp"
#include "collectives/collective_call.hpp"
#include "collectives/collective_error.hpp"
#include "collectives/dtype.hpp"

namespace fp8c::collectives {

inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout{30'000};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  virtual std::string_view backend_name() const = 0;

  // ncclAllGather: recv holds size() * send_count elements and rank i's send
  // lands at recv + i * send_count (rank-major concatenation along the
  // outermost dim). In place when send == recv + rank() * send_count.
  void all_gather(const void* send, void* recv, std::size_t send_count, ElemType dtype);

  // ncclReduceScatter: send holds size() * recv_count elements; rank i
  // receives block i reduced over all ranks. In place when
  // recv == send + rank() * recv_count.
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, ElemType dtype,
                      ReduceOp op);

  // ncclAllReduce: every rank receives the reduction of all ranks' send.
  // In place when send == recv.
  void all_reduce(const void* send, void* recv, std::size_t count, ElemType dtype, ReduceOp op);

  // ncclBroadcast: root's send is copied into every rank's recv. send is read
  // on the root only and may be null elsewhere. In place when send == recv.
  void broadcast(const void* send, void* recv, std::size_t count, ElemType dtype, int root);

  // Point to point around the ring, for pipelined all-gather and
  // reduce-scatter: rank r sends `count` elements of `dtype` from send to
  // rank (r + 1) % size() and receives `count` elements from rank
  // (r + size() - 1) % size() into recv (NCCL: ncclSend to the next rank and
  // ncclRecv from the previous one in one group). A collective like the
  // others: every rank calls it with the same count and dtype. Any dtype,
  // FP8 included (bytes are moved, never reduced). send and recv must not
  // overlap (there is no in-place form); with one rank, send is copied into
  // recv.
  void ring_shift(const void* send, void* recv, std::size_t count, ElemType dtype);

  // Returns once every rank has called barrier().
  void barrier();

  // Poisons this communicator and releases every rank waiting on it, like
  // ncclCommAbort. Used when a rank fails outside a collective (run_ranks
  // calls it when a rank's function throws) so its peers do not wait for the
  // timeout. Idempotent; never throws.
  void abort(const std::string& reason) noexcept;

  bool poisoned() const { return poisoned_; }
  // what() of the error that poisoned this communicator; empty if healthy.
  const std::string& poison_reason() const { return poison_reason_; }

 protected:
  Communicator(int rank, int size, std::chrono::milliseconds timeout);

  // Backends receive validated arguments (call_check.hpp, shared with the
  // device communicators): dtype and op in range, pointers non-null where
  // count > 0, no overlap other than NCCL's in-place forms (none for
  // ring_shift), no FP8 reduction, root in range. `call` names the
  // collective for errors and carries what ranks must agree on.
  virtual void run_all_gather(const CollectiveCall& call, const void* send, void* recv) = 0;
  virtual void run_reduce_scatter(const CollectiveCall& call, const void* send, void* recv) = 0;
  virtual void run_all_reduce(const CollectiveCall& call, const void* send, void* recv) = 0;
  virtual void run_broadcast(const CollectiveCall& call, const void* send, void* recv) = 0;
  virtual void run_ring_shift(const CollectiveCall& call, const void* send, void* recv) = 0;
  virtual void run_barrier(const CollectiveCall& call) = 0;

  // Called once, when this communicator becomes poisoned: make the other
  // ranks' pending and future collectives fail instead of wait.
  virtual void release_peers(const std::string& reason) noexcept = 0;

  // An error about `call` on this rank.
  CollectiveError error(FailureKind kind, const CollectiveCall& call, std::string detail) const;

  // The point by which a collective that starts now must finish.
  std::chrono::steady_clock::time_point deadline_from_now() const;

 private:
  // Runs `body` unless poisoned; poisons on any exception and rethrows it as
  // a CollectiveError.
  void guarded(const CollectiveCall& call, const std::function<void()>& body);
  void poison(const std::string& reason) noexcept;

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  CallSequence sequence_;
  bool poisoned_ = false;
  std::string poison_reason_;
};

// The ElemType of a C++ element type, for the types that have one unambiguously
// (16-bit and 8-bit floats are plain integers on the host).
template <typename T>
constexpr ElemType dtype_of();
template <>
constexpr ElemType dtype_of<float>() {
  return ElemType::fp32;
}
template <>
constexpr ElemType dtype_of<double>() {
  return ElemType::fp64;
}
template <>
constexpr ElemType dtype_of<std::int32_t>() {
  return ElemType::i32;
}
template <>
constexpr ElemType dtype_of<std::uint8_t>() {
  return ElemType::u8;
}

}  // namespace fp8c::collectives
