// run_ranks over a fresh group of either CPU backend, picked by name. Part of
// fp8c_collectives (which links gloo); fp8c_collectives_core has only the
// factory form in rank_threads.hpp.
#pragma once

#include <chrono>
#include <string_view>

#include "collectives/rank_threads.hpp"

namespace fp8c::collectives {

enum class Backend {
  kInProcess,  // InProcessGroup: shared memory, no sockets
  kGloo,       // gloo over TCP on 127.0.0.1, in-memory rendezvous store
};

std::string_view backend_name(Backend backend);

struct RankGroupOptions {
  Backend backend = Backend::kInProcess;
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
};

// A factory for a fresh group of `size` ranks of `options.backend`.
CommunicatorFactory cpu_ranks(int size, const RankGroupOptions& options);

// run_ranks(size, cpu_ranks(size, options), fn).
std::vector<std::exception_ptr> run_ranks(int size, const RankGroupOptions& options,
                                          const RankFunction& fn);

}  // namespace fp8c::collectives
