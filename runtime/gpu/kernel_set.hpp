// Every generated kernel a set of layer plans needs, compiled (in parallel,
// through the cubin cache) and loaded into the current context once, then
// shared by all the ranks that run in this process: a CUfunction may be
// launched from any thread that has its context current.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codegen/kernels/generated_kernel.hpp"
#include "runtime/block_quantize_launcher.hpp"
#include "runtime/dequantize_launcher.hpp"
#include "runtime/epilogue_launcher.hpp"
#include "runtime/jit.hpp"
#include "runtime/kernel_launchers.hpp"
#include "runtime/quantize_launcher.hpp"

namespace fp8c::runtime {

class KernelSet {
 public:
  // Compiles `kernels` (a lowering's kernel list) on `threads` threads (0:
  // one per core), then loads them.
  KernelSet(const Jit& jit, const std::vector<GeneratedKernel>& kernels, unsigned threads = 0);

  // The loaded launcher for a description; throws std::logic_error naming
  // the kernel when the set was built without it.
  const QuantizeLauncher& quantize(const QuantizeKernel& k) const;
  const BlockQuantizeLauncher& block_quantize(const BlockQuantizeKernel& k) const;
  const TransposeLauncher& transpose(const TransposeKernel& k = {}) const;
  const PermuteLauncher& permute(const PermuteKernel& k) const;
  const ScaleUpdateLauncher& scale_update(const ScaleUpdateKernel& k) const;
  const DbiasReduceLauncher& dbias_reduce(const DbiasReduceKernel& k) const;
  const RingSumLauncher& ring_sum(const RingSumKernel& k) const;
  const EpilogueLauncher& epilogue(const EpilogueKernel& k) const;
  const DequantizeLauncher& dequantize(const DequantizeKernel& k) const;

  // The JIT it was compiled with (which must outlive the set), for the
  // kernels compiled per call: the generated GEMMs.
  const Jit& jit() const { return jit_; }

  // Compile statistics, in the order given (for `fp8c bench` and logs).
  const std::vector<CompiledKernel>& compiled() const { return compiled_; }

 private:
  template <typename L>
  const L& find(const std::map<std::string, std::unique_ptr<L>>& m, const std::string& name) const;

  const Jit& jit_;
  std::vector<CompiledKernel> compiled_;
  std::map<std::string, std::unique_ptr<QuantizeLauncher>> quantize_;
  std::map<std::string, std::unique_ptr<BlockQuantizeLauncher>> block_quantize_;
  std::map<std::string, std::unique_ptr<TransposeLauncher>> transpose_;
  std::map<std::string, std::unique_ptr<PermuteLauncher>> permute_;
  std::map<std::string, std::unique_ptr<ScaleUpdateLauncher>> scale_update_;
  std::map<std::string, std::unique_ptr<DbiasReduceLauncher>> dbias_reduce_;
  std::map<std::string, std::unique_ptr<RingSumLauncher>> ring_sum_;
  std::map<std::string, std::unique_ptr<EpilogueLauncher>> epilogue_;
  std::map<std::string, std::unique_ptr<DequantizeLauncher>> dequantize_;
};

}  // namespace fp8c::runtime
