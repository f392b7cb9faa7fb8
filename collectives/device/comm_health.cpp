#include "collectives/device/comm_health.hpp"

namespace fp8c::runtime {

using collectives::CollectiveError;
using collectives::FailureKind;

bool CommHealth::poison(const CollectiveError& error, bool reported) noexcept {
  const std::lock_guard lock(mutex_);
  if (poisoned_.load(std::memory_order_relaxed)) return false;
  try {
    first_error_.emplace(error);
  } catch (...) {
    // Out of memory copying the text: keep the flag, lose the words.
  }
  reported_ = reported;
  poisoned_.store(true, std::memory_order_release);
  return true;
}

void CommHealth::throw_if_poisoned(const std::string& operation) {
  if (!poisoned()) return;
  const std::lock_guard lock(mutex_);
  if (!first_error_) {
    throw CollectiveError(FailureKind::kPoisoned, operation, rank_, size_,
                          "refused: this communicator was poisoned by an earlier error");
  }
  if (!reported_) {
    reported_ = true;
    throw *first_error_;
  }
  throw CollectiveError(
      FailureKind::kPoisoned, operation, rank_, size_,
      std::string("refused: this communicator was poisoned by an earlier error: ") +
          first_error_->what());
}

std::string CommHealth::reason() const {
  const std::lock_guard lock(mutex_);
  return first_error_ ? first_error_->what() : std::string();
}

}  // namespace fp8c::runtime
