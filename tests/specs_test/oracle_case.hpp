// One case of the distributed CPU oracle: a checked Spec planned and verified
// at R ranks and T tokens, with what the planner must do about it decided
// from the spec alone (tests/specs_test and tests/plan_fuzz share it).
//
// The planner must
// - refuse (PlanError naming the dim) when R does not divide a layer's split
//   dim (`out` of a column layer, `in` of a row layer) or, under sequence
//   parallelism, the tokens;
// - either plan or refuse naming the dim when the split is whole but an FP8
//   GEMM extent per rank is not a multiple of 16 (32 for MXFP8), or the
//   tokens are not (these rules may come to the planner);
// - plan every other case, and the oracle must pass it.
// Anything else (another exception, "internal error", a refusal that names
// no dim, a failed check, a chain the oracle did not run although it is a
// valid chain at R ranks) is a failure with a category and a key that groups
// failures of one kind.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "fp8c/spec.hpp"

namespace fp8c::spectest {

// What the planner must (or may) refuse at `ranks` and `tokens`, as dim names
// ("in", "out", "tokens") and the reasons in words.
struct PlanExpectation {
  std::set<std::string> must_dims;
  std::set<std::string> may_dims;
  std::vector<std::string> must_reasons;
  std::vector<std::string> may_reasons;
  bool must_refuse() const { return !must_dims.empty(); }
};
PlanExpectation expect_plan(const Spec& spec, std::uint32_t ranks, std::uint64_t tokens);

// Whether a PlanError message names `dim` ("in", "out" or "tokens") as a word.
bool names_dim(const std::string& message, const std::string& dim);

// Whether the chain producer -> consumer lines up at `ranks` ranks (the rules
// the checker applies to tensor_parallel, applied to the overriding rank count).
bool chain_valid_at(const Layer& producer, const Layer& consumer, std::uint32_t ranks);

// Replaces numbers by N and quoted names by 'L': messages of one kind compare equal.
std::string normalize(const std::string& message);

struct CaseOptions {
  std::uint32_t ranks = 1;
  std::uint64_t tokens = 64;
  std::uint32_t steps = 1;
  std::uint64_t seed = 1;
  std::chrono::milliseconds timeout{30'000};
  // Called with "plan" and "verify" before each stage (a crash then shows where).
  std::function<void(const char*)> stage;
};

struct CaseResult {
  enum class Outcome { passed, refused, failed };
  Outcome outcome = Outcome::failed;
  // For failures: a category ("plan: internal error", "verify: checks failed", ...)
  // and a key grouping failures of one kind (the category plus the normalized
  // message or the failed checks).
  std::string category;
  std::string key;
  // "verify: checks failed": each failed check, normalized; the key holds
  // only the traits of the layer (or chain) and the kind of comparison.
  std::vector<std::string> failed_checks;
  std::string detail;  // the message, or format_report(report)
};

CaseResult run_case(const Spec& spec, const CaseOptions& options);

std::string outcome_name(CaseResult::Outcome outcome);

}  // namespace fp8c::spectest
