// The distributed oracle: for each layer of a spec, run the N-rank plan and
// the 1-rank plan on the same seeded random data, assemble the N-rank shards
// into global tensors and compare output, dX, dW and dbias with the 1-rank
// run (bitwise where the arithmetic is the same, within a stated tolerance
// where a reduction order or a quantization block differs) and with a
// float64 reference of the unquantized math. docs/verify.md states the rules.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/plan/plan.hpp"
#include "fp8c/spec.hpp"
#include "runtime/cpu/executor.hpp"

namespace fp8c::cpu {

struct VerifyOptions {
  std::optional<std::uint32_t> ranks;  // default: each layer's tensor_parallel
  std::uint64_t tokens = 256;
  std::uint32_t steps = 1;
  std::uint64_t seed = 1;
  std::string layer;  // only this layer; empty: all
  bool force = false;
  double max_flops = 2e10;  // GEMM FLOPs of one layer step above which --force is needed
  ExecutorOptions executor;
  // Tests: edit the N-rank plan before it runs (with executor.skip_plan_check
  // to run a plan the checker rejects).
  std::function<void(LayerPlan&)> edit_plan;
  // Also run each producer -> consumer pair (`input =`) end to end.
  bool chains = true;
};

struct CheckResult {
  std::string layer;
  std::string check;     // e.g. "y: 4 ranks vs 1 rank", "dw: 4 ranks vs float64"
  double max_abs = 0.0;  // max |a - b|
  double rel = 0.0;      // ||a - b|| / ||b||
  // bitwise: must be bit-identical; elementwise: every |a_i - b_i| within
  // its own derived bound (tolerance shows ||bound|| / ||b||); else rel
  // must not exceed tolerance.
  double tolerance = 0.0;
  bool bitwise = false;
  bool elementwise = false;
  bool pass = false;
  std::string why;  // for a FAIL: what differs and where
};

struct VerifyReport {
  std::vector<CheckResult> checks;
  std::vector<std::string> notes;  // e.g. a chain that was not run, and why
  bool passed() const;
};

// Not runnable as asked (too large without force, unknown layer, bad shape).
class VerifyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A layer whose dgrad hands its producer FP8 dz (chain_hands_dz): its "dx"
// is dz = dx * act'(z), z the producer's pre-activation it read (in
// `run.captured`). Turns the float64 `dx` into that dz in place and returns
// the factor dx's float64_bound grows by (>= 1); 1 and no change for other
// plans. NaN values (a failing comparison) where z was not captured.
double handed_dz_reference(const LayerPlan& plan, const RankStepResult& run,
                           std::vector<double>& dx);

// The relative L2 error a layer's y, z, dx, dw or db may have against the
// float64 reference of the unquantized math, for the plan it ran
// (docs/verify.md derives each bound); `ref_z_over_y`: ||z|| / ||y|| of the
// reference, how much an activation can amplify z's relative error in y.
double float64_bound(const Layer& layer, const LayerPlan& plan, const std::string& tensor,
                     double ref_z_over_y = 1.0);

// A global tensor assembled from rank shards (`field` of each rank's result,
// shaped by `dims_field`); replicas (unsharded dims) must agree bitwise.
struct Assembled {
  std::vector<float> values;
  bool replicas_agree = true;
};
Assembled assemble(const std::vector<const RankStepResult*>& ranks,
                   std::vector<float> RankStepResult::*field,
                   std::array<Dim, 2> RankStepResult::*dims_field);
// The same for rank shards given directly (values with their dims).
Assembled assemble_shards(const std::vector<const std::vector<float>*>& values,
                          const std::vector<std::array<Dim, 2>>& dims);

// GEMM FLOPs of one training step of a layer (fprop, dgrad, wgrad).
double layer_step_flops(const Layer& layer, std::uint64_t tokens);

VerifyReport verify_spec(const Spec& spec, const VerifyOptions& options);

std::string format_report(const VerifyReport& report);
std::string report_to_json(const VerifyReport& report);

}  // namespace fp8c::cpu
