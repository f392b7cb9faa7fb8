// Any kernel description fp8c generates for a plan, as one value: what the
// lowering lists, the JIT compiles and the executors launch.
#pragma once

#include <string>
#include <variant>

#include "codegen/kernels/block_quantize.hpp"
#include "codegen/kernels/dequantize.hpp"
#include "codegen/kernels/epilogue.hpp"
#include "codegen/kernels/permute.hpp"
#include "codegen/kernels/quantize.hpp"
#include "codegen/kernels/ring_sum.hpp"
#include "codegen/kernels/scale_update.hpp"
#include "codegen/kernels/transpose.hpp"

namespace fp8c {

struct GeneratedKernel {
  std::variant<QuantizeKernel, BlockQuantizeKernel, TransposeKernel, PermuteKernel,
               ScaleUpdateKernel, EpilogueKernel, DequantizeKernel, DbiasReduceKernel,
               RingSumKernel>
      description;

  std::string name() const;
  bool operator==(const GeneratedKernel&) const = default;
};

KernelSource emit_cuda(const GeneratedKernel& kernel);

}  // namespace fp8c
