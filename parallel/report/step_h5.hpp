// The step/ group of a run (DESIGN.md "HDF5 schema", results/README.md), written through the
// results/ HDF5 layer by world rank 0, the one writer: step_times [steps, ranks], phases
// [steps, ranks, n_phases] and loss [steps] grow one step at a time and are published after
// each while that is cheap (results/run_file.hpp), so a killed run keeps its finished steps;
// memory, summary, check and comm tables are written at the end. Every method takes rows the
// driver already gathered from every rank: nothing here communicates.
// Not here: the run attributes themselves (results::RunContext) or any timing.
#pragma once

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "step/check.hpp"
#include "metrics/metrics.hpp"
#include "model/model.hpp"
#include "results/record.hpp"
#include "results/run_context.hpp"

namespace meshbench::parallel {

struct MemoryRow {
  std::string category;  // params, grads, optimizer, activations, buffers, process_peak_rss
  double measured_bytes, analytic_bytes;  // analytic NaN where there is no closed form
};

// One rank's memory row as step/memory stores it (plain, so the driver can gather it).
struct MemoryCell {
  int32_t rank;
  char category[24];
  double measured_bytes, analytic_bytes;
};
std::vector<MemoryCell> memory_cells(const std::vector<MemoryRow>& rows, int rank);


struct StepSummary {
  // NaN until summarize() fills them: a run that timed no step stores NaN, never garbage.
  double step_time_median = NAN, step_time_min = NAN, step_time_p99 = NAN, tokens_per_s = NAN,
      flops_per_step = NAN, model_flops_per_s = NAN, peak_measured_flops = NAN, mfu_measured_peak = NAN,
      peak_datasheet_flops = NAN, mfu_datasheet = NAN, bubble_measured = NAN, bubble_theory = NAN,
      exposed_comm_fraction = NAN, loss_first = NAN, loss_last = NAN;
  int straggler_rank = -1;
  std::string check;  // pass, fail, off
  // Per dimension: exposed / busy communication time over ranks and steps (NaN: none),
  // measured and analytic bytes per rank per step, and whether they agree.
  double exposed_dp = NAN, dp_wire_bytes = 0, dp_wire_bytes_analytic = 0;
  bool bytes_match = true;
};

// One trace event as stored in step/events (compute ops and communication calls). name: a
// layer's op as "<role>.<part>" (qkv.dweight, fc.proj.fwd, head.dinput, attention.chunk.fwd,
// moe.expert.fc.fwd; op.hpp), else empty; m, n, k its GEMM shape (m x k) times (k x n), else 0.
// t_posted, t_wait: when a posted call's posting returned and when the rank began to block on
// a call (trace.hpp), t_start and t_end for a compute op.
struct EventRow {
  int32_t rank, step, microbatch, chunk, layer;
  char kind[24], dim[16], phase[4];
  int32_t group;
  uint64_t bytes;
  double flops, t_post, t_start, t_end;  // seconds since the run's origin, rank 0's clock
  char name[32];
  int32_t m, n, k;
  double t_posted, t_wait;
};
// This rank's trace as rows; times on rank 0's clock (local - offset, comm/clock_sync.hpp) minus t_origin.
std::vector<EventRow> event_rows(const Trace& trace, int rank, double t_origin, double offset);

// Pipeline parallel rows: the stored activations after each pass, and each pass (phase F or
// B: a forward or backward of a chunk for a micro-batch; S or R: a send or receive, from its
// posting to its completion); times since the run's origin on rank 0's clock.
struct SlotRow {
  int32_t rank, step, held;
  int64_t bytes;
  double t;
};
struct PassRow {
  int32_t rank, step, microbatch, chunk;
  char phase[4];
  double t_start, t_end;
};
std::vector<SlotRow> slot_rows(const Trace& trace, int rank, double t_origin, double offset);
std::vector<PassRow> pass_rows(const Trace& trace, int rank, double t_origin, double offset);

class StepH5 {
 public:
  // Loads (append) or starts the file in memory, writes the root and run attributes and
  // creates /runs/<run_id>/step with `step_attrs`, then publishes. ctx.run_id may gain a -2
  // suffix. Throws core::RuntimeFault when the file cannot be read.
  StepH5(const std::string& path, bool append, results::RunContext& ctx, int ranks,
         const nlohmann::ordered_json& step_attrs, std::vector<std::string> phase_names,
         const std::vector<results::GroupInfo>& groups);
  ~StepH5();
  StepH5(const StepH5&) = delete;
  StepH5& operator=(const StepH5&) = delete;

  // One timed step: every rank's step time [rank] and phases [rank][phase], the global loss.
  void append_step(std::span<const double> step_times, std::span<const double> phases, double loss);
  // Tables of every rank's rows.
  void write_memory(const std::vector<MemoryCell>& rows);
  void write_comm(const std::vector<CommRow>& rows);
  void write_time_split(const std::vector<SplitRow>& rows);  // step/time_split
  void write_events(const std::vector<EventRow>& rows);
  // Pipeline parallel: step/pipeline (one row per rank), step/activation_slots, step/passes.
  void write_pipeline(const std::vector<PipelineRow>& rows, const std::vector<SlotRow>& slots,
                      const std::vector<PassRow>& passes);
  void write_check(const std::vector<CheckRow>& rows);
  void write_summary(const StepSummary& s);
  void write_op_profile(const std::vector<std::pair<std::string, double>>& op_seconds);
  void write_step_attrs(const nlohmann::ordered_json& attrs);  // adds or overwrites
  void finish(const std::string& status);  // end_time, status; publishes durably
  // Publishes when due (or `force`); false once a write failed. error() says what failed.
  bool publish(bool force = false);
  const std::string& error() const;
  void hold_error(const std::string& why);  // a write that threw: held like a failed publish

  const std::string& run_id() const { return run_id_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string run_id_;
};

}  // namespace meshbench::parallel
