#include "api/session_plan.hpp"

#include "codegen/plan/planner.hpp"

namespace fp8c {

SessionPlan plan_session(const Spec& spec, const SessionOptions& options, int ranks,
                         const LowerOptions& lowering) {
  PlanOptions p;
  p.ranks = static_cast<std::uint32_t>(ranks);
  p.tokens = options.tokens;
  SessionPlan s;
  s.plan = plan_spec(spec, p);
  s.lowered = lower_plan(spec, s.plan, lowering);
  return s;
}

}  // namespace fp8c
