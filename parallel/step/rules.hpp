// Every strategy's plan rules, in the order step_bench checks them, and the one call that
// resolves and validates a plan with them (options, --plan-only, the tests).
#pragma once

#include <string>
#include <vector>

#include "common/plan.hpp"

namespace meshbench::parallel {

// data parallel, ZeRO, tensor (and sequence), context, pipeline, expert parallel.
const std::vector<PlanRule>& plan_rules();

// resolve_plan(plan, world, plan_rules()): throws core::UsageError naming the rule.
void resolve_and_validate(Plan& plan, int world);

// What is legal but degenerate about a valid plan, the rules scripts/sweep prunes by
// (meshbench/steps.py): a pipeline with fewer micro-batches than stages (m < pp: a stage idles
// through most of the step), ZeRO over a data-parallel group of one rank (the same memory and
// work as ZeRO-0). One sentence each; step_bench prints them, --plan-only lists them (`notes`).
std::vector<std::string> plan_notes(const Plan& plan);

}  // namespace meshbench::parallel
