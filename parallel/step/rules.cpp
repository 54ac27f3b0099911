#include "step/rules.hpp"

#include <fmt/core.h>

#include "context_parallel/plan.hpp"
#include "data_parallel/data_parallel.hpp"
#include "expert_parallel/plan.hpp"
#include "pipeline_parallel/plan.hpp"
#include "tensor_parallel/plan.hpp"
#include "zero/zero.hpp"

namespace meshbench::parallel {

namespace {
// The tensors a rank of a real run holds stay below 2^31 elements (config.hpp); a prediction
// and a modelled run allocate none of them.
void validate_rank_tensors(const Plan& p) {
  if (p.allocates) validate_tensor_sizes(p.model, p.degrees.tp, p.degrees.cp, !p.flash);
}
}  // namespace

const std::vector<PlanRule>& plan_rules() {
  static const std::vector<PlanRule> rules = {validate_data_parallel,     validate_zero,
                                              validate_tensor_parallel,   validate_context_parallel,
                                              validate_pipeline_parallel, validate_expert_parallel,
                                              validate_rank_tensors};
  return rules;
}

void resolve_and_validate(Plan& plan, int world) { resolve_plan(plan, world, plan_rules()); }

std::vector<std::string> plan_notes(const Plan& plan) {
  std::vector<std::string> notes;
  const comm::Degrees& d = plan.degrees;
  if (d.pp > 1 && plan.micro_batches < d.pp)
    notes.push_back(fmt::format("--micro-batches {} with pp = {}: fewer micro-batches than pipeline stages, so each "
                                "stage idles through most of the step (scripts/sweep prunes m < pp); use "
                                "--micro-batches {} or more",
                                plan.micro_batches, d.pp, d.pp));
  const bool placed = plan.experts_placed();
  if (plan.zero > 0 && d.dp * d.cp == 1 && (!placed || d.edp == 1))
    notes.push_back(fmt::format("--zero {} over a data-parallel group of one rank (dp x cp = 1{}): it shards nothing, "
                                "the same memory and work as --zero 0 (scripts/sweep prunes it as degenerate)",
                                plan.zero, placed ? ", edp = 1" : ""));
  return notes;
}

}  // namespace meshbench::parallel
