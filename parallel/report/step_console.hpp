// The step run's console report on rank 0, from the gathered record: the MoE counts, the
// expert-parallel imbalance, the time split per rank, phases, communication with the analytic
// bytes beside the measured ones (a mismatch is flagged), pipeline rows, the summary lines,
// memory beside its closed forms and Megatron's activation formula, and the op profile.
// Not here: the header and progress lines the driver prints while it runs (step/).
#pragma once

#include <string>

#include "core/log.hpp"
#include "report/step_reporter.hpp"

namespace meshbench::parallel {

void print_step_report(const core::Log& out, const StepRecord& r);
void print_memory(const core::Log& out, const StepRecord& r);
void print_profile(const core::Log& out, const StepRecord& r);
void print_moe(const core::Log& out, const StepRecord& r, const std::string& shape);
void print_ep(const core::Log& out, const EpImbalance& e);

class ConsoleStepReporter final : public StepReporter {
 public:
  // `moe_shape`: the MoE line's description of the blocks ("2 MoE blocks x 4 experts, top-2, ...").
  ConsoleStepReporter(const core::Log& out, std::string moe_shape) : out_(out), moe_shape_(std::move(moe_shape)) {}
  void record(const StepRecord& r) override;

 private:
  const core::Log& out_;
  std::string moe_shape_;
};

}  // namespace meshbench::parallel
