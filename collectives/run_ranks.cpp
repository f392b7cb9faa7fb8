#include "collectives/run_ranks.hpp"

#include "collectives/gloo_communicator.hpp"

namespace fp8c::collectives {

std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::kInProcess:
      return "in-process";
    case Backend::kGloo:
      return "gloo";
  }
  return "invalid-backend";
}

CommunicatorFactory cpu_ranks(int size, const RankGroupOptions& options) {
  if (options.backend == Backend::kInProcess) return in_process_ranks(size, options.timeout);
  GlooOptions gloo_options;
  gloo_options.timeout = options.timeout;
  return gloo_thread_ranks(size, gloo_options);
}

std::vector<std::exception_ptr> run_ranks(int size, const RankGroupOptions& options,
                                          const RankFunction& fn) {
  return run_ranks(size, cpu_ranks(size, options), fn);
}

}  // namespace fp8c::collectives
