// The results of a step run as plain records, gathered on rank 0, and the reporters that
// turn them into output (console, JSON lines; HDF5 in step_h5), in the manner of Google
// Benchmark's records and reporters: reporters format, they never measure or communicate.
// summarize() derives the headline numbers from the gathered trace metrics only.
// Not here: the trace (trace.hpp), the per-rank metrics (metrics.hpp), HDF5 (step_h5.hpp).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "vocab/grad_sync.hpp"
#include "metrics/metrics.hpp"
#include "report/step_h5.hpp"

namespace meshbench::parallel {

// What rank 0 knows after the timed steps (the other ranks hold only their own column).
struct StepRecord {
  std::string model, plan;           // one-line descriptions
  int ranks = 1, steps = 0, warmup = 0;
  double global_tokens = 0;          // tokens of one step's global batch
  double flops_per_step = 0;         // model FLOPs of one step, all ranks together
  std::vector<std::vector<double>> step_time;                // [steps][ranks]
  std::vector<std::vector<std::array<double, 4>>> phases;    // [steps][ranks][kPhaseNames]
  std::vector<double> loss;                                  // [steps], the global mean
  std::vector<double> peak;                                  // [ranks] measured GEMM peak
  std::vector<CommRow> comm;                                 // every rank's rows
  std::vector<AnalyticBytes> analytic;  // per (dim, kind), per rank and step, from the plan
  std::vector<PipelineRow> pipeline;    // pipeline parallel: every rank's row
  std::vector<SplitRow> split;          // every rank's time split (metrics.hpp)
};

StepSummary summarize(const StepRecord& r, const std::string& check, double datasheet_peak);

// The bytes the plan moves in (dim, kind) over `steps` steps and `ranks` ranks.
uint64_t expected_bytes(const AnalyticBytes& a, int steps, int ranks);
// Every rank's analytic rows summed per (dim, kind) on rank 0 (collective over `world`):
// all_ranks the total payload, wire the mean per rank.
std::vector<AnalyticBytes> sum_over_ranks(const std::vector<AnalyticBytes>& local, int ranks, MPI_Comm world);

// Console: the per-rank table, the communication table with the analytic bytes beside the
// measured ones (a mismatch is flagged), and the summary lines.
void print_step_report(const core::Log& out, const StepRecord& r, const StepSummary& s);

// JSON lines beside the HDF5 file: one line per step, one summary line.
void write_step_jsonl(const std::string& path, const std::string& run_id, const std::string& tag,
                      const StepRecord& r, const StepSummary& s, int threads);

}  // namespace meshbench::parallel
