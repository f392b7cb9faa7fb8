// Runs one function on N ranks, one thread per rank. This is how the CPU
// reference executor runs a tensor/sequence-parallel plan, and how the tests
// drive the communicators. Backend-neutral: a factory makes each rank's
// communicator (see run_ranks.hpp for the version that picks a CPU backend).
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "collectives/communicator.hpp"

namespace fp8c::collectives {

// Makes rank `rank`'s communicator; called on that rank's thread, so it may
// block until all ranks have joined (gloo does).
using CommunicatorFactory = std::function<std::unique_ptr<Communicator>(int rank)>;

using RankFunction = std::function<void(Communicator& comm)>;

// Runs `fn` on ranks 0..size-1 concurrently and returns, per rank, the
// exception it ended with (nullptr where it returned normally), including a
// failure to create its communicator. When a rank's function throws, its
// communicator is aborted at once so that the other ranks fail promptly
// instead of waiting for the timeout. All communicators live until every rank
// has finished, so a rank that is done never pulls a connection out from under
// a slower one.
std::vector<std::exception_ptr> run_ranks(int size, const CommunicatorFactory& make_communicator,
                                          const RankFunction& fn);

// A factory over a fresh InProcessGroup of `size` ranks.
CommunicatorFactory in_process_ranks(int size,
                                     std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);

// Rethrows the lowest-numbered rank's exception, if any: for callers that
// want success or one error.
void rethrow_first_failure(const std::vector<std::exception_ptr>& failures);

}  // namespace fp8c::collectives
