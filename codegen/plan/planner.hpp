// Spec -> Plan: the steps of forward, backward and the scale update of every
// layer, for one tensor-parallel size and one token count. Every plan the
// planner returns has passed check_plan.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>

#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

struct PlanOptions {
  std::optional<std::uint32_t> ranks;  // overrides every layer's tensor_parallel
  std::uint64_t tokens = 8192;         // M: total tokens of the step
};

// A spec that cannot be planned for the options (sizes that do not divide).
class PlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Plan plan_spec(const Spec& spec, const PlanOptions& options = {});

}  // namespace fp8c
