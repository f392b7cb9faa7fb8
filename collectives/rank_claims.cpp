#include "collectives/rank_claims.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace fp8c::collectives {

// A size below 1 leaves no rank to claim; the group refuses it itself.
RankClaims::RankClaims(std::string group, int size)
    : group_(std::move(group)), claimed_(static_cast<std::size_t>(std::max(size, 0)), false) {}

void RankClaims::claim(int rank) {
  const int size = static_cast<int>(claimed_.size());
  if (rank < 0 || rank >= size) {
    throw std::invalid_argument(group_ + ": rank " + std::to_string(rank) +
                                " is out of range for a group of " + std::to_string(size));
  }
  const std::lock_guard lock(mutex_);
  if (claimed_[static_cast<std::size_t>(rank)]) {
    throw std::invalid_argument(group_ + ": rank " + std::to_string(rank) +
                                " already has a communicator");
  }
  claimed_[static_cast<std::size_t>(rank)] = true;
}

}  // namespace fp8c::collectives
