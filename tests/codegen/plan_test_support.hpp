// Helpers shared by the plan tests: load an example, find steps and tensors.
#pragma once

#include <string>
#include <vector>

#include "codegen/plan/plan.hpp"
#include "codegen/plan/planner.hpp"
#include "fp8c/spec.hpp"

namespace fp8c::testing {

Spec example(const std::string& file);  // examples/<file>
std::vector<std::string> example_files();

// A one-layer spec: `linear` with the given recipe, mode, layout and options.
Spec one_layer(RecipeKind recipe, ParallelMode mode, std::uint32_t tp, bool sequence_parallel,
               SaveInput save = SaveInput::fp8, Debug debug = {});

// Steps of a kind in one pass.
std::vector<const Step*> steps_of(const std::vector<Step>& pass, StepKind kind);
std::vector<const Step*> all_steps_of(const LayerPlan& layer, StepKind kind);

// The collectives of a layer as text: kind, the dtypes of its tensors, bytes.
std::vector<std::string> collective_signature(const LayerPlan& layer);

const GemmStep& gemm_of(const LayerPlan& layer, GemmRole role);
// The step that produces tensor `id`, or nullptr.
const Step* producer_of(const LayerPlan& layer, int id);
// The layer's delayed-scaling state keys.
std::vector<std::string> delayed_keys(const LayerPlan& layer);

}  // namespace fp8c::testing
