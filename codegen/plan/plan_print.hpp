// A Plan as text for people (`fp8c plan`) and as JSON for tools
// (`fp8c plan --json`, schema in docs/plan-json.md).
#pragma once

#include <string>

#include "codegen/plan/plan.hpp"

namespace fp8c {

std::string print_plan(const Plan& plan);
std::string plan_to_json(const Plan& plan);

// One tensor in the printed form: `fc1.x.fp8.col e4m3 [tokens 1024/8192, in 8192]
// columnwise per_tensor`.
std::string describe_tensor(const Tensor& tensor);

}  // namespace fp8c
