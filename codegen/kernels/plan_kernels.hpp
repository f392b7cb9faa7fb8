// Which generated kernels a Plan needs: each quantize and amax step of a
// layer becomes a kernel description, fused as the step says; transpose,
// permute, scale_update, epilogue and dequantize steps become their own
// kernels. Identical
// descriptions (the same variant needed by several steps or layers) are
// listed once. Steps whose generator does not exist yet are listed too, so
// `fp8c compile` says plainly what it cannot build.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "codegen/kernels/block_quantize.hpp"
#include "codegen/kernels/dequantize.hpp"
#include "codegen/kernels/epilogue.hpp"
#include "codegen/kernels/permute.hpp"
#include "codegen/kernels/quantize.hpp"
#include "codegen/kernels/scale_update.hpp"
#include "codegen/kernels/transpose.hpp"
#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

// Any kernel description a plan step can need.
struct GeneratedKernel {
  std::variant<QuantizeKernel, BlockQuantizeKernel, TransposeKernel, PermuteKernel,
               ScaleUpdateKernel, EpilogueKernel, DequantizeKernel>
      description;

  std::string name() const;
  bool operator==(const GeneratedKernel&) const = default;
};

KernelSource emit_cuda(const GeneratedKernel& kernel);

struct PlannedKernel {
  GeneratedKernel kernel;
  std::vector<std::string> used_by;  // "fc1 forward step 2 (quantize fc1.x)", ...
};

struct PlanKernels {
  std::vector<PlannedKernel> kernels;
  std::vector<std::string> not_generated;  // steps that need a generator fp8c lacks so far
};

// The kernels one step runs, in launch order (a permute step: one per input);
// none for collectives and GEMMs. not_generated: the step needs a generator
// fp8c lacks so far (`why` says which form, when that helps).
struct StepKernels {
  std::vector<GeneratedKernel> kernels;
  bool not_generated = false;
  std::string why;
};
StepKernels kernels_for_step(const LayerPlan& plan, const Step& step, const Layer& layer);

// `layer` is the spec's layer the plan was made from (its activation and recipe).
void collect_kernels(const LayerPlan& plan, const Layer& layer, PlanKernels& into);

PlanKernels kernels_for(const Plan& plan, const Spec& spec);

}  // namespace fp8c
