#include "runtime/cpu/parallel_for.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace fp8c::cpu {
namespace {

thread_local bool inside_parallel_for = false;

std::size_t thread_count() {
  if (const char* env = std::getenv("FP8C_CPU_THREADS")) {
    try {
      const long v = std::stol(env);
      if (v >= 1) return static_cast<std::size_t>(v);
    } catch (const std::exception&) {
      // Not a number: the default below, as for an unset variable.
    }
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

void parallel_for(std::size_t n, std::size_t grain,
                  const std::function<void(std::size_t, std::size_t)>& body) {
  if (n == 0) return;
  grain = std::max<std::size_t>(grain, 1);
  const std::size_t chunks = std::min(thread_count(), (n + grain - 1) / grain);
  if (chunks <= 1 || inside_parallel_for) {
    body(0, n);
    return;
  }
  const std::size_t step = (n + chunks - 1) / chunks;
  std::vector<std::exception_ptr> failures(chunks);
  const auto run = [&](std::size_t c) {
    inside_parallel_for = true;
    try {
      const std::size_t begin = c * step;
      if (begin < n) body(begin, std::min(n, begin + step));
    } catch (...) {
      failures[c] = std::current_exception();
    }
    inside_parallel_for = false;
  };
  std::vector<std::thread> threads;
  threads.reserve(chunks - 1);
  for (std::size_t c = 1; c < chunks; ++c) threads.emplace_back(run, c);
  run(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& f : failures)
    if (f) std::rethrow_exception(f);
}

}  // namespace fp8c::cpu
