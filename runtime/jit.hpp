// The JIT: generated kernel source in, CUBIN out, through the on-disk cache.
// A small wrapper on purpose: what a kernel computes is codegen's business;
// here is only how it becomes machine code, and what that cost.
#pragma once

#include <string>
#include <vector>

#include "codegen/kernels/kernel_source.hpp"
#include "runtime/cubin_cache.hpp"
#include "runtime/nvrtc.hpp"

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
  // Compile time (a share of its program's when compiled in a batch, by
  // source size), or cache read time on a hit.
  double milliseconds = 0;
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
  // The kernels the cache does not have are compiled as at most `threads`
  // programs of several kernels each where there are more of them than
  // threads (runtime/kernel_batch.hpp); each is still cached under its own
  // key. The first failure is rethrown after all threads have stopped.
  std::vector<CompiledKernel> compile_all(const std::vector<KernelSource>& kernels,
                                          unsigned threads = 0) const;

 private:
  // Compiles kernels that share their NVRTC options as one program (alone
  // when there is one, or when the program fails: then the error names the
  // kernel) and caches each.
  std::vector<CompiledKernel> compile_batch(const std::vector<const KernelSource*>& kernels,
                                            const std::vector<Digest>& keys,
                                            const std::vector<CacheLookup>& lookups) const;
  CompiledKernel store(const KernelSource& kernel, const Digest& key, CacheLookup lookup,
                       const std::vector<char>& cubin, const NvrtcOutput& resources,
                       double milliseconds) const;

  std::string arch_;
  CubinCache cache_;
};

}  // namespace fp8c::runtime
