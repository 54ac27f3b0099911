// Every strategy's plan rules, in the order step_bench checks them, and the one call that
// resolves and validates a plan with them (options, --plan-only, the tests).
#pragma once

#include <vector>

#include "vocab/plan.hpp"

namespace meshbench::parallel {

// data parallel, ZeRO, tensor (and sequence), context, pipeline, expert parallel.
const std::vector<PlanRule>& plan_rules();

// resolve_plan(plan, world, plan_rules()): throws core::UsageError naming the rule.
void resolve_and_validate(Plan& plan, int world);

}  // namespace meshbench::parallel
