// The failure state of one DeviceCommunicator, shared by the backends: once
// poisoned it stays poisoned. The error that poisoned it reaches the caller
// once with its own kind (kTimeout, kMismatch, ...); every later call is
// refused with kPoisoned naming that error, as collectives/communicator.hpp
// specifies. Thread-safe: NCCL's watchdog thread poisons while the owning
// thread calls.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <string>

#include "collectives/collective_error.hpp"

namespace fp8c::runtime {

class CommHealth {
 public:
  CommHealth(int rank, int size) : rank_(rank), size_(size) {}

  bool poisoned() const { return poisoned_.load(std::memory_order_acquire); }

  // Records `error` unless already poisoned. `reported`: the caller throws
  // `error` itself, so later calls get kPoisoned; otherwise (an error found
  // by another thread) the next call throws `error`. Returns true when this
  // call poisoned the communicator, so that the caller releases its peers
  // exactly once.
  bool poison(const collectives::CollectiveError& error, bool reported) noexcept;

  // Throws when poisoned: the pending unreported error, else kPoisoned for
  // `operation` naming the first error.
  void throw_if_poisoned(const std::string& operation);

  // what() of the first error; empty while healthy.
  std::string reason() const;

 private:
  const int rank_;
  const int size_;
  std::atomic<bool> poisoned_{false};
  mutable std::mutex mutex_;
  std::optional<collectives::CollectiveError> first_error_;
  bool reported_ = false;
};

}  // namespace fp8c::runtime
