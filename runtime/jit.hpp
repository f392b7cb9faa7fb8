// The JIT: generated kernel source in, CUBIN out, through the on-disk cache.
// A small wrapper on purpose: what a kernel computes is codegen's business;
// here is only how it becomes machine code, and what that cost.
#pragma once

#include <string>
#include <vector>

#include "codegen/kernels/kernel_source.hpp"
#include "fp8c/spec.hpp"
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
  // What built it, e.g. "nvrtc 13.0" or "llvm 19.1.7 + nvJitLink 13.0".
  std::string compiler;
};

// `backend`: the compiler of the kernels built as IR (KernelSource::ir);
// the kinds still written as CUDA text go through NVRTC under either, and
// PTX sources (SourceLanguage::ptx) straight to the PTX assembler. With
// KernelBackend::llvm, compiling an IR kernel throws
// llvm_backend::LlvmUnavailable in a build or install without the LLVM
// module, and Unavailable without nvJitLink.
class Jit {
 public:
  Jit(std::string arch, CubinCache cache, KernelBackend backend = KernelBackend::nvrtc);

  const std::string& arch() const { return arch_; }
  const CubinCache& cache() const { return cache_; }
  KernelBackend backend() const { return backend_; }

  // Whether `kernel` is built by the LLVM backend under this Jit.
  bool lowers_through_llvm(const KernelSource& kernel) const;

  // The cache key: what is compiled (the CUDA source and its options, the
  // PTX, or for the LLVM backend the printed IR), the architecture, and
  // the identity and version of each compiler it goes through.
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
  // Builds one kernel that does not go through NVRTC (LLVM-built or PTX).
  CompiledKernel compile_ptx_kernel(const KernelSource& kernel, const Digest& key,
                                    CacheLookup lookup) const;
  CompiledKernel store(const KernelSource& kernel, const Digest& key, CacheLookup lookup,
                       const std::vector<char>& cubin, const NvrtcOutput& resources,
                       double milliseconds) const;
  std::string compiler_of(const KernelSource& kernel) const;

  std::string arch_;
  CubinCache cache_;
  KernelBackend backend_;
};

}  // namespace fp8c::runtime
