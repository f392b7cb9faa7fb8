#include "runtime/jit.hpp"

#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "codegen/backends/llvm/llvm_backend.hpp"
#include "runtime/kernel_batch.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/ptx_compiler.hpp"

namespace fp8c::runtime {

Jit::Jit(std::string arch, CubinCache cache, KernelBackend backend)
    : arch_(std::move(arch)), cache_(std::move(cache)), backend_(backend) {}

bool Jit::lowers_through_llvm(const KernelSource& kernel) const {
  return backend_ == KernelBackend::llvm && kernel.ir && kernel.language == SourceLanguage::cuda;
}

std::string Jit::compiler_of(const KernelSource& kernel) const {
  if (lowers_through_llvm(kernel))
    return "llvm " + llvm_backend::llvm_version() + " + " + ptx_compiler_version();
  if (kernel.language == SourceLanguage::ptx) return ptx_compiler_version();
  const NvrtcApi& api = nvrtc();
  return "nvrtc " + std::to_string(api.major) + "." + std::to_string(api.minor);
}

Digest Jit::key(const KernelSource& kernel) const {
  Sha256 h;
  // Each field is length-prefixed so that no two different inputs hash the same bytes.
  const auto field = [&h](const std::string& s) {
    const std::uint64_t n = s.size();
    h.update(&n, sizeof n).update(s);
  };
  field("fp8c-cubin-key-3");  // 3: the compiler's identity names its kind
  field(arch_);
  field(compiler_of(kernel));
  field(kernel.entry);
  if (lowers_through_llvm(kernel)) {
    // The IR is what LLVM compiles; its CUDA print is not.
    field(ir::print(*kernel.ir));
    return h.finish();
  }
  field(kernel.language == SourceLanguage::ptx ? "ptx" : "cuda");
  field(kernel.source);
  for (const auto& o : kernel.options) field(o);
  return h.finish();
}

namespace {

CompiledKernel hit(const KernelSource& kernel, CacheEntry& entry) {
  CompiledKernel out;
  out.name = kernel.name;
  out.entry = kernel.entry;
  out.cubin = std::move(entry.cubin);
  out.registers = entry.registers;
  out.spill_stores = entry.spill_stores;
  out.spill_loads = entry.spill_loads;
  out.cache = CacheOutcome::hit;
  return out;
}

bool through_nvrtc(const Jit& jit, const KernelSource& kernel) {
  return kernel.language == SourceLanguage::cuda && !jit.lowers_through_llvm(kernel);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

CompiledKernel Jit::store(const KernelSource& kernel, const Digest& key, CacheLookup lookup,
                          const std::vector<char>& cubin, const NvrtcOutput& resources,
                          double milliseconds) const {
  CompiledKernel out;
  out.name = kernel.name;
  out.entry = kernel.entry;
  out.registers = resources.registers;
  out.spill_stores = resources.spill_stores;
  out.spill_loads = resources.spill_loads;
  out.milliseconds = milliseconds;
  out.cache = lookup == CacheLookup::corrupt ? CacheOutcome::rebuilt : CacheOutcome::compiled;
  CacheEntry entry;
  entry.cubin = cubin;
  entry.registers = resources.registers;
  entry.spill_stores = resources.spill_stores;
  entry.spill_loads = resources.spill_loads;
  // A kernel whose resources are unknown (NVRTC served it without ptxas's
  // report, or the cubin could not be read) is not cached, so that a later
  // compile, for example under CUDA_CACHE_DISABLE=1, can learn them.
  const bool resources_known =
      resources.registers > 0 && resources.spill_stores >= 0 && resources.spill_loads >= 0;
  if (!resources_known)
    out.cache_warning = "not cached: " + kernel.name + "'s registers or spills are unknown";
  else if (auto warning = cache_.store(key, entry))
    out.cache_warning = *warning;
  out.cubin = cubin;
  out.compiler = compiler_of(kernel);
  return out;
}

CompiledKernel Jit::compile_ptx_kernel(const KernelSource& kernel, const Digest& key,
                                       CacheLookup lookup) const {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string ptx =
      lowers_through_llvm(kernel) ? llvm_backend::ptx(*kernel.ir, arch_) : kernel.source;
  const NvrtcOutput c = compile_ptx_to_cubin(ptx, kernel.name + ".ptx", kernel.entry, arch_);
  // The time is the whole way from IR (or PTX) to CUBIN.
  return store(kernel, key, lookup, c.cubin, c, since(t0));
}

CompiledKernel Jit::compile(const KernelSource& kernel) const {
  const auto t0 = std::chrono::steady_clock::now();
  const Digest k = key(kernel);
  CacheEntry entry;
  const CacheLookup lookup = cache_.load(k, entry);
  if (lookup == CacheLookup::hit) {
    CompiledKernel out = hit(kernel, entry);
    out.compiler = compiler_of(kernel);
    out.milliseconds = since(t0);
    return out;
  }
  return compile_batch({&kernel}, {k}, {lookup}).front();
}

std::vector<CompiledKernel> Jit::compile_batch(const std::vector<const KernelSource*>& kernels,
                                               const std::vector<Digest>& keys,
                                               const std::vector<CacheLookup>& lookups) const {
  if (kernels.size() == 1 && !through_nvrtc(*this, *kernels[0]))
    return {compile_ptx_kernel(*kernels[0], keys[0], lookups[0])};
  if (kernels.size() == 1) {
    const NvrtcOutput c = compile_to_cubin(kernels[0]->source, kernels[0]->name + ".cu",
                                           kernels[0]->entry, arch_, kernels[0]->options);
    return {store(*kernels[0], keys[0], lookups[0], c.cubin, c, c.milliseconds)};
  }
  std::vector<std::string> entries;
  double size = 0;
  for (const auto* k : kernels) {
    entries.push_back(k->entry);
    size += static_cast<double>(k->source.size());
  }
  NvrtcBatchOutput batch;
  try {
    batch = compile_batch_to_cubin(batch_source(kernels), "batch_of_" + kernels[0]->name + ".cu",
                                   entries, arch_, kernels[0]->options);
  } catch (const std::runtime_error&) {
    // Name the kernel that does not compile, with its own log: each alone.
    std::vector<CompiledKernel> out;
    for (std::size_t i = 0; i < kernels.size(); ++i)
      out.push_back(compile_batch({kernels[i]}, {keys[i]}, {lookups[i]}).front());
    return out;
  }
  // Each kernel is charged its share of the program's time, by source size.
  std::vector<CompiledKernel> out;
  for (std::size_t i = 0; i < kernels.size(); ++i)
    out.push_back(
        store(*kernels[i], keys[i], lookups[i], batch.cubin, batch.entries[i],
              batch.milliseconds * static_cast<double>(kernels[i]->source.size()) / size));
  return out;
}

std::vector<CompiledKernel> Jit::compile_all(const std::vector<KernelSource>& kernels,
                                             unsigned threads) const {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<CompiledKernel> results(kernels.size());
  // Cache lookups first: only the misses are compiled.
  std::vector<Digest> keys(kernels.size());
  std::vector<CacheLookup> lookups(kernels.size());
  std::map<std::vector<std::string>, std::vector<std::size_t>> misses;  // by NVRTC options
  std::vector<std::size_t> llvm_or_ptx;
  std::size_t missing = 0;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    keys[i] = key(kernels[i]);
    CacheEntry entry;
    lookups[i] = cache_.load(keys[i], entry);
    if (lookups[i] == CacheLookup::hit) {
      results[i] = hit(kernels[i], entry);
      results[i].compiler = compiler_of(kernels[i]);
      results[i].milliseconds = since(t0);
    } else if (!through_nvrtc(*this, kernels[i])) {
      llvm_or_ptx.push_back(i);  // one at a time: a PTX module is one kernel
    } else {
      misses[kernels[i].options].push_back(i);
      ++missing;
    }
  }
  // More kernels than threads: batches of about equal size (one program
  // each, see kernel_batch.hpp), at most kMaxBatch kernels so that a cache
  // entry (which holds its batch's CUBIN) stays small.
  constexpr std::size_t kMaxBatch = 8;
  std::vector<std::vector<std::size_t>> batches;
  for (const auto& [options, indices] : misses) {
    const std::size_t share = std::max<std::size_t>(
        1, (threads * indices.size() + missing - 1) / std::max<std::size_t>(1, missing));
    const std::size_t bins = std::max(share, (indices.size() + kMaxBatch - 1) / kMaxBatch);
    std::vector<double> costs;
    for (std::size_t i : indices) costs.push_back(static_cast<double>(kernels[i].source.size()));
    for (const auto& group : balance_batches(costs, bins)) {
      batches.emplace_back();
      for (std::size_t g : group) batches.back().push_back(indices[g]);
    }
  }
  for (std::size_t i : llvm_or_ptx) batches.push_back({i});
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto work = [&] {
    for (std::size_t b; (b = next.fetch_add(1)) < batches.size();) {
      try {
        std::vector<const KernelSource*> sources;
        std::vector<Digest> batch_keys;
        std::vector<CacheLookup> batch_lookups;
        for (std::size_t i : batches[b]) {
          sources.push_back(&kernels[i]);
          batch_keys.push_back(keys[i]);
          batch_lookups.push_back(lookups[i]);
        }
        std::vector<CompiledKernel> done = compile_batch(sources, batch_keys, batch_lookups);
        for (std::size_t j = 0; j < done.size(); ++j) results[batches[b][j]] = std::move(done[j]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = batches.size();  // stop handing out work
      }
    }
  };
  std::vector<std::thread> pool;
  const auto workers = std::min<std::size_t>(threads, batches.size());
  for (std::size_t t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  return results;
}

}  // namespace fp8c::runtime
