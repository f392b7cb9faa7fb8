// The shared state of an InProcessGroup: one staging buffer per rank and a
// reusable all-ranks rendezvous with a poison flag. Internal to the
// in-process backend.
//
// A data collective runs in two rendezvous phases:
//   1. arrive: each rank copies its send buffer into its staging buffer, then
//      waits for all ranks. The last rank to arrive checks that every rank
//      made the same call. After this, all staging buffers are read-only.
//   2. depart: each rank has read what it needs from the staging buffers and
//      waits for all ranks, so that nobody overwrites its staging buffer with
//      the next collective's data while a peer is still reading it.
// Staging copies make every in-place form trivially safe (a rank may write
// its recv while peers read its send, because peers read the copy).
// ring_shift, which has no in-place form, skips the staging copy: each rank
// publishes its send pointer instead, and its successor copies straight
// from it between arrive and depart (so the send buffer is read only while
// its owner waits in the rendezvous).
// Happens-before for the staging buffers comes from the mutex: a rank writes
// its buffer before it arrives (under the mutex) and peers read it only after
// they see the phase complete (under the same mutex).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/collective_call.hpp"
#include "collectives/collective_error.hpp"

namespace fp8c::collectives {

class InProcessRendezvous {
 public:
  enum class Phase { kArrive, kDepart };

  explicit InProcessRendezvous(int size);

  int size() const { return size_; }

  // Rank `rank`'s staging buffer. Only that rank writes it, and only before
  // it arrives; everyone reads it between arrive and depart.
  std::vector<std::byte>& staging(int rank) { return staging_[static_cast<std::size_t>(rank)]; }

  // Rank `rank`'s published send pointer, under the same rule as staging():
  // written by that rank before it arrives, read by peers until depart.
  const void*& published(int rank) { return published_[static_cast<std::size_t>(rank)]; }

  // Blocks until all ranks reach `phase` of the collective `call`, the group
  // is poisoned, or `deadline` passes. Throws CollectiveError: kMismatch if
  // the ranks' calls disagree (arrive phase), kTimeout naming the missing
  // ranks, the group's failure kind if another rank poisoned it while this one
  // waited, kPoisoned if it was poisoned before this rank got here.
  void wait_for_all(int rank, const CollectiveCall& call, Phase phase,
                    std::chrono::steady_clock::time_point deadline,
                    std::chrono::milliseconds timeout);

  // Fails the group: every waiting rank wakes and throws, every later call
  // throws. The first reason is kept.
  void poison(FailureKind kind, const std::string& reason);

 private:
  // Requires mutex_ held.
  void poison_locked(FailureKind kind, const std::string& reason);
  std::string missing_ranks_locked() const;
  std::string present_ranks_locked() const;

  const int size_;
  std::vector<std::vector<std::byte>> staging_;
  std::vector<const void*> published_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t generation_ = 0;  // bumps each time all ranks have arrived
  int arrived_ = 0;
  std::vector<bool> present_;  // who has arrived in the current generation
  std::vector<CollectiveCall> calls_;
  bool poisoned_ = false;
  FailureKind poison_kind_ = FailureKind::kPeerFailed;
  std::string poison_reason_;
};

}  // namespace fp8c::collectives
