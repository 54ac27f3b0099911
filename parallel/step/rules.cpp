#include "step/rules.hpp"

#include "context_parallel/context_parallel.hpp"
#include "data_parallel/data_parallel.hpp"
#include "expert_parallel/expert_parallel.hpp"
#include "pipeline_parallel/pipeline_parallel.hpp"
#include "tensor_parallel/tensor_parallel.hpp"
#include "zero/zero.hpp"

namespace meshbench::parallel {

const std::vector<PlanRule>& plan_rules() {
  static const std::vector<PlanRule> rules = {validate_data_parallel,     validate_zero,
                                              validate_tensor_parallel,   validate_context_parallel,
                                              validate_pipeline_parallel, validate_expert_parallel};
  return rules;
}

void resolve_and_validate(Plan& plan, int world) { resolve_plan(plan, world, plan_rules()); }

}  // namespace meshbench::parallel
