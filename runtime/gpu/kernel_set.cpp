#include "runtime/gpu/kernel_set.hpp"

#include <stdexcept>
#include <type_traits>

namespace fp8c::runtime {

KernelSet::KernelSet(const Jit& jit, const std::vector<GeneratedKernel>& kernels, unsigned threads)
    : jit_(jit) {
  // Compile everything in parallel first; the launchers below then read the
  // cubins back from the cache.
  std::vector<KernelSource> sources;
  for (const auto& k : kernels) sources.push_back(emit_cuda(k));
  compiled_ = jit.compile_all(sources, threads);

  for (const auto& k : kernels) {
    std::visit(
        [&](const auto& d) {
          using D = std::decay_t<decltype(d)>;
          const std::string name = d.name();
          if constexpr (std::is_same_v<D, QuantizeKernel>)
            quantize_.try_emplace(name, std::make_unique<QuantizeLauncher>(jit, d));
          else if constexpr (std::is_same_v<D, BlockQuantizeKernel>)
            block_quantize_.try_emplace(name, std::make_unique<BlockQuantizeLauncher>(jit, d));
          else if constexpr (std::is_same_v<D, TransposeKernel>)
            transpose_.try_emplace(name, std::make_unique<TransposeLauncher>(jit, d));
          else if constexpr (std::is_same_v<D, PermuteKernel>)
            permute_.try_emplace(name, std::make_unique<PermuteLauncher>(jit, d));
          else if constexpr (std::is_same_v<D, ScaleUpdateKernel>)
            scale_update_.try_emplace(name, std::make_unique<ScaleUpdateLauncher>(jit, d));
          else if constexpr (std::is_same_v<D, EpilogueKernel>)
            epilogue_.try_emplace(name, std::make_unique<EpilogueLauncher>(jit, d));
          else if constexpr (std::is_same_v<D, DequantizeKernel>)
            dequantize_.try_emplace(name, std::make_unique<DequantizeLauncher>(jit, d));
          else if constexpr (std::is_same_v<D, DbiasReduceKernel>)
            dbias_reduce_.try_emplace(
                name, std::make_unique<DbiasReduceLauncher>(jit, d.output, d.slices));
          else if constexpr (std::is_same_v<D, RingSumKernel>)
            ring_sum_.try_emplace(name, std::make_unique<RingSumLauncher>(jit, d));
          else
            static_assert(sizeof(D) == 0, "KernelSet: a GeneratedKernel alternative is not loaded");
        },
        k.description);
  }
}

template <typename L>
const L& KernelSet::find(const std::map<std::string, std::unique_ptr<L>>& m,
                         const std::string& name) const {
  auto it = m.find(name);
  if (it == m.end())
    throw std::logic_error("kernel set: kernel '" + name +
                           "' was not compiled for this plan (planner and executor disagree)");
  return *it->second;
}

const QuantizeLauncher& KernelSet::quantize(const QuantizeKernel& k) const {
  return find(quantize_, k.name());
}
const BlockQuantizeLauncher& KernelSet::block_quantize(const BlockQuantizeKernel& k) const {
  return find(block_quantize_, k.name());
}
const TransposeLauncher& KernelSet::transpose(const TransposeKernel& k) const {
  return find(transpose_, k.name());
}
const PermuteLauncher& KernelSet::permute(const PermuteKernel& k) const {
  return find(permute_, k.name());
}
const ScaleUpdateLauncher& KernelSet::scale_update(const ScaleUpdateKernel& k) const {
  return find(scale_update_, k.name());
}
const DbiasReduceLauncher& KernelSet::dbias_reduce(const DbiasReduceKernel& k) const {
  return find(dbias_reduce_, k.name());
}
const RingSumLauncher& KernelSet::ring_sum(const RingSumKernel& k) const {
  return find(ring_sum_, k.name());
}

const EpilogueLauncher& KernelSet::epilogue(const EpilogueKernel& k) const {
  return find(epilogue_, k.name());
}
const DequantizeLauncher& KernelSet::dequantize(const DequantizeKernel& k) const {
  return find(dequantize_, k.name());
}

}  // namespace fp8c::runtime
