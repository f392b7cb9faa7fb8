// Spec -> Plan: the steps of forward, backward and the scale update of every
// layer, for one tensor-parallel size and one token count. Every plan the
// planner returns has passed check_plan, and every FP8 GEMM in it meets the
// size rules `fp8c check` enforces at the spec's own size (K and the feature
// dims multiples of 16, 32 for MXFP8), whatever --ranks and --tokens say:
// a plan that would break one is a PlanError naming the dim.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

struct PlanOptions {
  std::optional<std::uint32_t> ranks;  // overrides every layer's tensor_parallel
  std::uint64_t tokens = 8192;         // M: total tokens of the step
  // A one-rank plan (ranks = 1) whose block-scaled tensors use the block grid
  // of an N-rank plan, per layer (name -> N): where N ranks would each
  // quantize a shard whose extent along the weight's split dim is not a
  // whole number of blocks, blocks restart at each shard boundary here too
  // (Tensor::block_segments). The oracle's one-rank run, so N ranks and one
  // rank quantize alike.
  std::map<std::string, std::uint32_t> block_grid = {};
};

// A spec that cannot be planned for the options (sizes that do not divide,
// an FP8 GEMM extent the tensor cores cannot take).
class PlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Plan plan_spec(const Spec& spec, const PlanOptions& options = {});

}  // namespace fp8c
