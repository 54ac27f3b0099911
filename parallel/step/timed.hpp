// The timed loop of step_bench: warm-up, then the timed steps, each started by one agreement
// of every rank (it replaces a barrier) on whether to stop: the time limit (rank 0's clock),
// a SIGTERM/SIGINT on any rank, a write that failed on rank 0, or a loss or gradient that
// was not finite on any rank in the step before. A timed step's global loss and every rank's
// time go to the reporters as it ends (rank 0). Then the run's status and exit code.
// Not here: the step itself (executor.hpp), the metrics (metrics/), output (report/).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/log.hpp"
#include "report/step_reporter.hpp"
#include "step/options.hpp"
#include "step/setup.hpp"

namespace meshbench::parallel {

// Why the loop stopped early, agreed by every rank (bits OR-ed over the world).
enum StopBits : int { kStopTime = 1, kStopSignal = 2, kStopWrite = 4, kStopDiverged = 8 };

struct LoopEnd {
  int why = 0;          // StopBits, 0: every step ran
  int at_step = -1;     // the step (counting warm-up) that stopped it
  std::string detail;   // diverged: what was not finite, agreed by every rank
};

// `reporters`: rank 0's (null elsewhere, or without -O); `losses` gains each timed step's.
// `env`: the model's step; null under --compute modelled (st.replay runs the list, no loss).
LoopEnd timed_steps(const Options& o, StepEnv<float>* env, Setup& st, StepReporters* reporters,
                    std::vector<double>& losses);

// The warnings for a loop that stopped early (rank 0).
void warn_loop_end(const core::Log& out, const Options& o, const LoopEnd& end);

// The run's status in the file and its exit code, from how the loop ended and the check.
std::pair<results::RunStatus, int> verdict(const LoopEnd& end, const std::string& check);

}  // namespace meshbench::parallel
