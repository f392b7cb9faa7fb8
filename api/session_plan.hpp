// What a Session runs, decided without a GPU: the plan of a spec for the
// session's options and group size, and its lowering with `lowering` (the
// Session passes what its GPU and cuBLASLt offer), whose kernel list is
// exactly what the Session compiles (and what `fp8c compile --ranks N
// --tokens M` lists for the same spec, with the options of its target).
#pragma once

#include "codegen/lower/lowered.hpp"
#include "codegen/plan/plan.hpp"
#include "fp8c/session.hpp"
#include "fp8c/spec.hpp"

namespace fp8c {

struct SessionPlan {
  Plan plan;
  LoweredPlan lowered;
};

// Throws PlanError for a spec that cannot be planned for the options.
SessionPlan plan_session(const Spec& spec, const SessionOptions& options, int ranks,
                         const LowerOptions& lowering);

}  // namespace fp8c
