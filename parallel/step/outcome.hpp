// The back half of a step_bench run: this rank's metrics and rows (from its trace, model and
// plan), gathered into rank 0's record (metrics/gather.hpp), summarized, and handed to the
// reporters; then the run's last lines and its exit code. Rank 0's write errors are handed
// back for the driver to agree on with every rank (exit 3 on all).
// Not here: the timed loop (timed.hpp), what the reporters write (report/).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/clock_sync.hpp"
#include "comm/topology.hpp"
#include "core/log.hpp"
#include "metrics/records.hpp"
#include "predict/predict.hpp"
#include "report/step_reporter.hpp"
#include "step/launch.hpp"
#include "step/options.hpp"
#include "step/setup.hpp"
#include "step/timed.hpp"

namespace meshbench::parallel {

// Rank 0's reporters (console; with -O the results file and JSON lines; with --trace
// Perfetto), null on the other ranks; `problem`: why the results file could not be started.
std::unique_ptr<StepReporters> make_reporters(const Options& o, const Launched& l, const Peak& peak, double datasheet,
                                              results::RunContext& ctx, bool appending, const core::Log& out,
                                              int rank, std::string& problem);

// The GEMM peak again after the steps (a shared machine drifts): MFU uses the higher. Only
// when this rank's timed steps ran for at least kPeakAgainS (`loop_s`): over a shorter loop a
// drift is not what the second measurement is for, and a test's tiny 2-rank run took 0.34 s
// with it against 0.26 s without; the peak before the steps stands alone then.
constexpr double kPeakAgainS = 1.0;
double peak_after(const Options& o, const Compute& cp, const Peak& before, double loop_s, StepReporters* reps,
                  const core::Log& out);

// The communication the plan moves per step on this rank, per (dim, kind): the gradient
// reduction's, tensor, context and expert parallel's (for the layers this rank holds) and the
// pipeline's point-to-point messages. Expert parallel's depend on the routing: over `steps`.
std::vector<AnalyticBytes> plan_analytic(const Plan& plan, const Setup& st, int steps);

// What the run produced before its record is built.
struct RunResult {
  std::string check = "off";
  std::vector<CheckRow> check_rows;
  std::vector<double> losses;  // every timed step's global loss
  LoopEnd end;
  double peak = 0, datasheet = NAN;  // the measured GEMM peak used for MFU; the datasheet's
  comm::ClockOffset clock;           // this rank's offset from rank 0's clock
  double t_origin = 0;               // the run's origin on rank 0's clock
  std::string run_id;                // the results file's id of the run
  std::optional<Prediction> predicted;  // --predict
};

// Collective over the world (the gathers). `reporters`: rank 0's (null elsewhere). Returns the
// exit code; `write_error`: rank 0's first write error, or empty.
int report_run(const Options& o, const Setup& st, const RunResult& r, const comm::Topology& topo, int rank,
               StepReporters* reporters, const core::Log& out, std::string& write_error);

}  // namespace meshbench::parallel
