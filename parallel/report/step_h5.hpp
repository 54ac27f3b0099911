// The step/ group of a run (docs/results.md), written through the results/ HDF5 layer by
// world rank 0, the one writer: step_times [steps, ranks], phases [steps, ranks, n_phases]
// and loss [steps] grow one step at a time and are published after each while that is cheap
// (results/run_file.hpp), so a killed run keeps its finished steps; the memory, summary,
// check, comm, time-split, event and pipeline tables are written from the run's record at
// the end. A reporter (reporter.hpp): it never communicates.
// Not here: the run attributes themselves (results::RunContext) or any timing.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/step_reporter.hpp"
#include "results/record.hpp"
#include "results/run_context.hpp"

namespace meshbench::parallel {

class StepH5 final : public StepReporter {
 public:
  // Loads (append) or starts the file in memory, writes the root and run attributes and
  // creates /runs/<run_id>/step with `step_attrs`, then publishes. ctx.run_id may gain a -2
  // suffix. Throws core::RuntimeFault when the file cannot be read.
  StepH5(const std::string& path, bool append, results::RunContext& ctx, int ranks,
         const nlohmann::ordered_json& step_attrs, std::vector<std::string> phase_names,
         const std::vector<results::GroupInfo>& groups);
  ~StepH5() override;
  StepH5(const StepH5&) = delete;
  StepH5& operator=(const StepH5&) = delete;

  void step(const StepPoint& p) override;  // appends the step; publishes when due
  void add_step_attrs(const nlohmann::ordered_json& attrs) override;  // adds or overwrites
  // The tables of every rank's rows (step/memory, comm, time_split, check, summary,
  // op_profile, events; pipeline, activation_slots, passes) and the ep_*, moe_*, clock and
  // divergence attributes.
  void record(const StepRecord& r) override;
  void finish(results::RunStatus s) override;  // end_time, status; publishes durably
  const std::string& error() const override;


 private:
  void write_memory(const std::vector<MemoryCell>& rows);
  void write_comm(const std::vector<CommRow>& rows);
  void write_time_split(const std::vector<SplitRow>& rows);
  void write_events(const std::vector<EventRow>& rows);
  void write_pipeline(const std::vector<PipelineRow>& rows, const std::vector<SlotRow>& slots,
                      const std::vector<PassRow>& passes);
  void write_check(const std::vector<CheckRow>& rows);
  void write_summary(const StepSummary& s);
  void write_predicted(const PredictedRecord& p);
  void write_op_profile(const std::vector<std::pair<std::string, double>>& op_seconds);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshbench::parallel
