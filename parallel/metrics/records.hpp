// The record of a step run: every number the reporters (console, HDF5, JSON lines, Perfetto;
// report/) turn into output, as plain rows. A rank builds its own rows from its trace and
// state (records.cpp); gather.hpp brings every rank's rows to rank 0, which alone holds the
// whole StepRecord. The reporters only format it: they never measure or communicate.
// Not here: the per-rank metrics' definitions (metrics.hpp), the summary numbers (summary.hpp).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/clock_sync.hpp"
#include "expert_parallel/ep_report.hpp"
#include "metrics/metrics.hpp"
#include "common/grad_sync.hpp"
#include "common/trace.hpp"

namespace meshbench::parallel {

// One memory category of a rank: the peak bytes allocated during the timed steps beside the
// closed form (NaN where there is none).
struct MemoryRow {
  std::string category;  // params, grads, optimizer, activations, buffers, engine_peak, process_peak_rss
  double measured_bytes, analytic_bytes;
};

// One rank's memory row as step/memory stores it (plain, so it can be gathered).
struct MemoryCell {
  int32_t rank;
  char category[24];
  double measured_bytes, analytic_bytes;
};
std::vector<MemoryCell> memory_cells(const std::vector<MemoryRow>& rows, int rank);

// One row of --check (step/check.hpp): a quantity against its reference.
struct CheckRow {
  std::string quantity;  // loss, logits, grads, "grad:<name>", params_after
  double max_abs, rel, tolerance;  // rel = ||a - ref|| / ||ref||; over ranks, the worst
  bool pass;
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

// The run's headline numbers (summary.hpp derives them from the record).
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

// Mixture of experts: the timed steps' assignments and capacity drops over every rank (the
// busiest expert: the maximum over ranks); tensor-parallel ranks route the same tokens once.
struct MoeSummary {
  bool on = false;  // the model has MoE blocks
  int64_t routed = 0, dropped = 0, worst_expert = 0;
  double drop_fraction() const { return routed > 0 ? double(dropped) / double(routed) : 0.0; }
};

// One timed step as it finishes: every rank's time and phases (rank-major) and the global loss.
struct StepPoint {
  int step = 0;
  std::vector<double> times, phases;  // [ranks], [ranks][kPhaseNames]
  double loss = 0;
};

// --predict CAL: the step model's prediction of this run (predict/predict.hpp), stored beside
// the measurement (step/predicted) and printed with it.
struct PredictedExposed {
  char dim[16] = {};
  double seconds = 0;  // per step, the mean over ranks
};
struct PredictedRankRow {
  int32_t rank = 0;  // pipeline rank (its tp, cp, dp and ep ranks predict alike)
  double step_time_s = 0, compute_s = 0, bubble_s = 0, exposed_s = 0;
};
struct PredictedRecord {
  bool on = false;
  double step_time_s = NAN, tokens_per_s = NAN, bubble = NAN;
  bool extrapolated = false;
  std::string calibration, fabric, extrapolated_what, notes;
  std::vector<PredictedExposed> exposed;
  std::vector<PredictedRankRow> per_rank;
};

// Everything rank 0 reports at the end of a run (other ranks hold only what they gathered).
struct StepRecord {
  std::string model, plan, tag;      // one-line descriptions; --tag
  int ranks = 1, steps = 0, warmup = 0, threads = 1;
  double global_tokens = 0;          // tokens of one step's global batch
  double flops_per_step = 0;         // model FLOPs of one step, all ranks together
  // hardware FLOPs: the model's plus what --recompute runs again (the step attribute
  // flops_per_step_hardware; HFU on the console against the same peak as MFU)
  double hardware_flops_per_step = 0;
  std::vector<std::vector<double>> step_time;                // [steps][ranks]
  std::vector<std::vector<std::array<double, 4>>> phases;    // [steps][ranks][kPhaseNames]
  std::vector<double> loss;                                  // [steps], the global mean
  std::vector<double> peak;                                  // [ranks] measured GEMM peak
  std::vector<CommRow> comm;                                 // every rank's rows
  std::vector<AnalyticBytes> analytic;  // per (dim, kind), per rank and step, from the plan
  std::vector<PipelineRow> pipeline;    // pipeline parallel: every rank's row
  std::vector<SplitRow> split;          // every rank's time split (metrics.hpp)
  std::vector<MemoryRow> memory;        // rank 0's (the console)
  std::vector<MemoryCell> memory_cells; // every rank's (step/memory)
  double megatron_activation_bytes = NAN;  // Megatron's closed form for the model, all layers
  std::string megatron_activation_formula;
  std::vector<CheckRow> check_rows;
  std::string check = "off";            // pass, fail, off
  std::vector<std::pair<std::string, double>> op_profile;  // rank 0's op seconds per step (--profile)
  std::vector<EventRow> events;         // --profile or --trace: every rank's
  std::vector<SlotRow> slots;           // pipeline parallel: every rank's
  std::vector<PassRow> passes;
  std::vector<comm::ClockOffset> offsets;  // [ranks]
  std::vector<std::string> hosts;          // [ranks]
  double clock_error_max = 0;
  MoeSummary moe;
  EpImbalance ep;                       // expert parallel (ep > 1)
  StepSummary summary;
  PredictedRecord predicted;            // --predict
  std::string status = "ok";            // ok, failed, timeout, killed, diverged
  bool oversubscribed = false;          // more ranks or threads than cores on some host
  std::string diverged;                 // what was not finite, where
};

}  // namespace meshbench::parallel
