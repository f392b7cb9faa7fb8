// The plan checker: the rules that make a layout or usage mix-up a planning
// error instead of wrong gradients. The planner runs it on every plan it
// returns; tests and tools run it on plans edited by hand.
#pragma once

#include <string>
#include <vector>

#include "codegen/plan/plan.hpp"

namespace fp8c {

// Every rule a valid plan obeys; returns one message per violation (each
// naming the layer, the step and the tensor), empty when the plan is valid.
std::vector<std::string> check_plan(const Plan& plan);
std::vector<std::string> check_layer_plan(const LayerPlan& layer);

}  // namespace fp8c
