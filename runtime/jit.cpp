#include "runtime/jit.hpp"

#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/nvrtc.hpp"

namespace fp8c::runtime {

Jit::Jit(std::string arch, CubinCache cache) : arch_(std::move(arch)), cache_(std::move(cache)) {}

Digest Jit::key(const KernelSource& kernel) const {
  const NvrtcApi& api = nvrtc();
  Sha256 h;
  // Each field is length-prefixed so that no two different inputs hash the same bytes.
  const auto field = [&h](const std::string& s) {
    const std::uint64_t n = s.size();
    h.update(&n, sizeof n).update(s);
  };
  field("fp8c-cubin-key-2");  // 2: resources read from the cubin
  field(arch_);
  field("nvrtc " + std::to_string(api.major) + "." + std::to_string(api.minor));
  field(kernel.entry);
  field(kernel.source);
  for (const auto& o : kernel.options) field(o);
  return h.finish();
}

CompiledKernel Jit::compile(const KernelSource& kernel) const {
  const auto t0 = std::chrono::steady_clock::now();
  const Digest k = key(kernel);
  CompiledKernel out;
  out.name = kernel.name;
  out.entry = kernel.entry;
  CacheEntry entry;
  const CacheLookup lookup = cache_.load(k, entry);
  if (lookup == CacheLookup::hit) {
    out.cubin = std::move(entry.cubin);
    out.registers = entry.registers;
    out.spill_stores = entry.spill_stores;
    out.spill_loads = entry.spill_loads;
    out.cache = CacheOutcome::hit;
    out.milliseconds =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
  NvrtcOutput compiled =
      compile_to_cubin(kernel.source, kernel.name + ".cu", kernel.entry, arch_, kernel.options);
  out.registers = compiled.registers;
  out.spill_stores = compiled.spill_stores;
  out.spill_loads = compiled.spill_loads;
  out.milliseconds = compiled.milliseconds;
  out.cache = lookup == CacheLookup::corrupt ? CacheOutcome::rebuilt : CacheOutcome::compiled;
  entry.cubin = compiled.cubin;
  entry.registers = compiled.registers;
  entry.spill_stores = compiled.spill_stores;
  entry.spill_loads = compiled.spill_loads;
  // A kernel whose resources are unknown (NVRTC served it without ptxas's
  // report, or the cubin could not be read) is not cached, so that a later
  // compile, for example under CUDA_CACHE_DISABLE=1, can learn them.
  const bool resources_known =
      compiled.registers > 0 && compiled.spill_stores >= 0 && compiled.spill_loads >= 0;
  if (!resources_known)
    out.cache_warning = "not cached: " + kernel.name + "'s registers or spills are unknown";
  else if (auto warning = cache_.store(k, entry))
    out.cache_warning = *warning;
  out.cubin = std::move(compiled.cubin);
  return out;
}

std::vector<CompiledKernel> Jit::compile_all(const std::vector<KernelSource>& kernels,
                                             unsigned threads) const {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(kernels.size()));
  std::vector<CompiledKernel> results(kernels.size());
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < kernels.size();) {
      try {
        results[i] = compile(kernels[i]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = kernels.size();  // stop handing out work
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  return results;
}

}  // namespace fp8c::runtime
