// The JIT: generated kernel source in, CUBIN out, through the on-disk cache.
// A small wrapper on purpose: what a kernel computes is codegen's business;
// here is only how it becomes machine code, and what that cost.
#pragma once

#include <string>
#include <vector>

#include "codegen/kernels/kernel_source.hpp"
#include "runtime/cubin_cache.hpp"

namespace fp8c::runtime {

using fp8c::KernelSource;

enum class CacheOutcome { hit, compiled, rebuilt };  // rebuilt: a corrupt entry was replaced

struct CompiledKernel {
  std::string name;
  std::string entry;
  std::vector<char> cubin;
  int registers = -1;
  int spill_stores = 0;  // bytes; -1 if unknown (see NvrtcOutput)
  int spill_loads = 0;
  double milliseconds = 0;  // compile time, or cache read time on a hit
  CacheOutcome cache = CacheOutcome::compiled;
  std::string cache_warning;  // set when the cache could not be written
};

class Jit {
 public:
  Jit(std::string arch, CubinCache cache);

  const std::string& arch() const { return arch_; }
  const CubinCache& cache() const { return cache_; }

  // The cache key: source, options, architecture and NVRTC's version.
  Digest key(const KernelSource& kernel) const;

  CompiledKernel compile(const KernelSource& kernel) const;

  // Compiles kernels on `threads` threads (0: one per core), in input order.
  // The first failure is rethrown after all threads have stopped.
  std::vector<CompiledKernel> compile_all(const std::vector<KernelSource>& kernels,
                                          unsigned threads = 0) const;

 private:
  std::string arch_;
  CubinCache cache_;
};

}  // namespace fp8c::runtime
