#include "collectives/rank_threads.hpp"

#include <stdexcept>
#include <string>
#include <thread>

#include "collectives/in_process_group.hpp"

namespace fp8c::collectives {
namespace {

std::string describe_exception(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& error) {
    return error.what();
  } catch (...) {
    return "a non-standard exception";
  }
}

}  // namespace

std::vector<std::exception_ptr> run_ranks(int size, const CommunicatorFactory& make_communicator,
                                          const RankFunction& fn) {
  if (size < 1) throw std::invalid_argument("run_ranks: need at least one rank");
  const auto count = static_cast<std::size_t>(size);
  std::vector<std::exception_ptr> failures(count);
  std::vector<std::unique_ptr<Communicator>> communicators(count);

  auto run_rank = [&](int rank) {
    const auto slot = static_cast<std::size_t>(rank);
    try {
      communicators[slot] = make_communicator(rank);
      fn(*communicators[slot]);
    } catch (...) {
      failures[slot] = std::current_exception();
      if (communicators[slot]) {
        communicators[slot]->abort("its function threw: " + describe_exception(failures[slot]));
      }
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(count);
  for (int rank = 0; rank < size; ++rank) threads.emplace_back(run_rank, rank);
  for (std::thread& thread : threads) thread.join();
  // Destroyed only now that every rank has finished (see the header).
  communicators.clear();
  return failures;
}

CommunicatorFactory in_process_ranks(int size, std::chrono::milliseconds timeout) {
  auto group = std::make_shared<InProcessGroup>(size, timeout);
  return [group](int rank) { return group->communicator(rank); };
}

void rethrow_first_failure(const std::vector<std::exception_ptr>& failures) {
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

}  // namespace fp8c::collectives
