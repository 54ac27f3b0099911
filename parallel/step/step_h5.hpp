// The step/ group of a run (DESIGN.md "HDF5 schema", results/README.md), written through the
// results/ HDF5 layer: step_times [steps, ranks], phases [steps, ranks, n_phases] and loss
// [steps] grow one step at a time and are flushed after each, so a killed run keeps every
// finished step; memory, summary, check and comm tables are written at the end.
// Not here: the run attributes themselves (results::RunContext) or any timing.
#pragma once

#include <mpi.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "model.hpp"
#include "results/run_context.hpp"

namespace meshbench::parallel {

struct MemoryRow {
  std::string category;  // params, grads, optimizer, activations, buffers, process_peak_rss
  double measured_bytes, analytic_bytes;  // analytic NaN where there is no closed form
};

struct CheckRow {
  std::string quantity;  // loss, logits, grads, "grad:<name>"
  double max_abs, rel, tolerance;  // rel = ||a - ref|| / ||ref||
  bool pass;
};

struct StepSummary {
  double step_time_median, step_time_min, step_time_p99, tokens_per_s, flops_per_step,
      model_flops_per_s, peak_measured_flops, mfu_measured_peak, peak_datasheet_flops,
      mfu_datasheet, bubble_measured, bubble_theory, exposed_comm_fraction, loss_first,
      loss_last;
  int straggler_rank;
  std::string check;  // pass, fail, off
};

class StepH5 {
 public:
  // Creates (or with append opens) the file on `world`, writes the root and run attributes
  // and creates /runs/<run_id>/step with `step_attrs`. ctx.run_id may gain a -2 suffix.
  StepH5(const std::string& path, bool append, MPI_Comm world, results::RunContext& ctx,
         const nlohmann::ordered_json& step_attrs, std::vector<std::string> phase_names);
  ~StepH5();
  StepH5(const StepH5&) = delete;
  StepH5& operator=(const StepH5&) = delete;

  // One timed step: this rank's step time and phase times; loss from rank 0.
  void append_step(double step_time, std::span<const double> phases, double loss);
  void write_memory(const std::vector<MemoryRow>& rows);
  void write_check(const std::vector<CheckRow>& rows);
  void write_summary(const StepSummary& s);
  void write_op_profile(const std::vector<std::pair<std::string, double>>& op_seconds);
  // The op trace (DESIGN.md events): one row per op call; times relative to `t_origin`.
  void write_events(const std::vector<OpEvent>& events, double t_origin);
  void write_step_attrs(const nlohmann::ordered_json& attrs);  // adds or overwrites
  void finish(const std::string& status);  // end_time, status; flushes

  const std::string& run_id() const { return run_id_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string run_id_;
};

}  // namespace meshbench::parallel
