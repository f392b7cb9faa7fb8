#include "collectives/in_process_rendezvous.hpp"

namespace fp8c::collectives {

InProcessRendezvous::InProcessRendezvous(int size)
    : size_(size),
      staging_(static_cast<std::size_t>(size)),
      published_(static_cast<std::size_t>(size), nullptr),
      present_(static_cast<std::size_t>(size), false),
      calls_(static_cast<std::size_t>(size)) {}

void InProcessRendezvous::poison(FailureKind kind, const std::string& reason) {
  const std::lock_guard lock(mutex_);
  poison_locked(kind, reason);
}

void InProcessRendezvous::poison_locked(FailureKind kind, const std::string& reason) {
  if (poisoned_) return;
  poisoned_ = true;
  poison_kind_ = kind;
  poison_reason_ = reason;
  changed_.notify_all();
}

std::string InProcessRendezvous::missing_ranks_locked() const {
  std::string ranks;
  for (int rank = 0; rank < size_; ++rank) {
    if (present_[static_cast<std::size_t>(rank)]) continue;
    if (!ranks.empty()) ranks += ", ";
    ranks += std::to_string(rank);
  }
  return ranks;
}

std::string InProcessRendezvous::present_ranks_locked() const {
  std::string ranks;
  for (int rank = 0; rank < size_; ++rank) {
    if (!present_[static_cast<std::size_t>(rank)]) continue;
    if (!ranks.empty()) ranks += ", ";
    ranks += std::to_string(rank);
  }
  return ranks.empty() ? "none" : ranks;
}

void InProcessRendezvous::wait_for_all(int rank, const CollectiveCall& call, Phase phase,
                                       std::chrono::steady_clock::time_point deadline,
                                       std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (poisoned_) {
    throw CollectiveError(FailureKind::kPoisoned, describe(call), rank, size_,
                          "refused: the group was poisoned by an earlier error: " + poison_reason_);
  }
  const auto slot = static_cast<std::size_t>(rank);
  calls_[slot] = call;
  present_[slot] = true;
  if (++arrived_ == size_) {
    if (phase == Phase::kArrive) {
      if (const auto disagreeing = first_disagreeing_rank(calls_)) {
        const std::string reason = describe_disagreement(calls_, *disagreeing);
        poison_locked(FailureKind::kMismatch, reason);
        throw CollectiveError(FailureKind::kMismatch, describe(call), rank, size_, reason);
      }
    }
    arrived_ = 0;
    present_.assign(present_.size(), false);
    ++generation_;
    changed_.notify_all();
    return;
  }

  const std::uint64_t my_generation = generation_;
  const bool completed = changed_.wait_until(
      lock, deadline, [&] { return poisoned_ || generation_ != my_generation; });
  // The phase completing wins over a poison that came after it: the data of
  // this phase is complete, and the next phase will see the poison.
  if (generation_ != my_generation) return;
  if (completed) {  // poisoned by another rank while this one waited
    throw CollectiveError(poison_kind_, describe(call), rank, size_, poison_reason_);
  }
  const std::string reason =
      "timed out after " + std::to_string(timeout.count()) + " ms waiting for rank(s) " +
      missing_ranks_locked() + (phase == Phase::kArrive ? " to arrive at " : " to finish ") +
      std::string(collective_name(call.kind)) + " #" + std::to_string(call.sequence) +
      " (present: " + present_ranks_locked() + "; first noticed by rank " + std::to_string(rank) +
      ")";
  poison_locked(FailureKind::kTimeout, reason);
  throw CollectiveError(FailureKind::kTimeout, describe(call), rank, size_, reason);
}

}  // namespace fp8c::collectives
