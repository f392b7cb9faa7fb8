// Splits an index range over the machine's cores for the CPU oracle's heavy
// loops (the reference GEMMs, the float64 reference, the bound GEMMs). The
// callers partition by output element, so each element is still summed by
// one thread in one order: results do not depend on the thread count.
#pragma once

#include <cstddef>
#include <functional>

namespace fp8c::cpu {

// Calls body(begin, end) over disjoint chunks covering [0, n), at least
// `grain` indices each, on up to FP8C_CPU_THREADS (default: the hardware's
// count) threads, and returns when all are done. A call made from inside
// another parallel_for runs inline, so nested loops do not multiply threads.
// The first exception a chunk throws is rethrown here.
void parallel_for(std::size_t n, std::size_t grain,
                  const std::function<void(std::size_t begin, std::size_t end)>& body);

}  // namespace fp8c::cpu
