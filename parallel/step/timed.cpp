#include "step/timed.hpp"

#include <mpi.h>

#include <atomic>
#include <cmath>
#include <fmt/core.h>

#include "comm/agree.hpp"
#include "comm/watched_comm.hpp"
#include "core/error.hpp"
#include "core/op_watch.hpp"
#include "core/timer.hpp"
#include "metrics/gather.hpp"
#include "step/launch.hpp"

namespace meshbench::parallel {

namespace {

int stop_decision(int mine, core::OpWatch* watch) {
  int all = 0;
  comm::WatchScope w(watch, "MPI_Allreduce (stop decision, step start)", sizeof all, "world");
  MB_CHECK_MPI(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD), "world");
  return all;
}

// This rank's vote before a step; the time limit and the writes are rank 0's to judge.
int my_stop(const Options& o, bool root, StepReporters* reporters, double t_origin, bool diverged) {
  int mine = diverged ? kStopDiverged : 0;
  if (signal_received()) mine |= kStopSignal;
  if (root && o.time_limit > 0 && core::now_seconds() - t_origin > o.time_limit) mine |= kStopTime;
  if (root && reporters && !reporters->error().empty()) mine |= kStopWrite;
  return mine;
}

// The loop ends at step s: a divergence's detail is agreed so every rank reports the same.
LoopEnd end_at(int why, int s, const std::string& detail) {
  LoopEnd end{why, s - 1, detail};
  if (why & kStopDiverged) {
    std::string first = detail;
    try {
      comm::agree_on_fault(MPI_COMM_WORLD, first);
    } catch (const core::OutputFault& e) {
      end.detail = e.what();
    }
  }
  return end;
}

// At the first timed step: the op profile and the memory peaks cover the timed steps only.
void start_timing(Gpt<float>& model) {
  model.reset_profile();
  model.memory().reset_peaks();
  model.moe().reset_totals();
}

}  // namespace

LoopEnd timed_steps(const Options& o, StepEnv<float>* env, Setup& st, StepReporters* reporters,
                    std::vector<double>& losses) {
  const double t_origin = core::now_seconds();
  const int total = o.warmup + o.steps;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Backend<float>* be = st.model ? &st.model->backend() : nullptr;
  if (be) be->take_nonfinite_grads();  // the check's steps are not this loop's
  bool diverged = false;
  std::string detail;
  for (int s = 0;; ++s) {
    const int why = stop_decision(my_stop(o, rank == 0, reporters, t_origin, diverged), st.watch);
    if (why != 0) return end_at(why, s, detail);
    if (s == total) return {};
    if (st.watch) st.watch->set_context(fmt::format("step {} of {} ({} warm-up)", s, total, o.warmup));
    const bool timed = s >= o.warmup;
    if (s == o.warmup && st.model) start_timing(*st.model);
    st.trace.on = timed;
    const int step = timed ? s - o.warmup : -1;
    if (o.inject_stall == rank && s == o.warmup) {  // a compute phase that never progresses (tests)
      core::set_phase("forward (--inject-stall)", 0);
      std::atomic<std::uint64_t> spin{0};
      for (;;) spin.fetch_add(1, std::memory_order_relaxed);  // never returns: the watchdog or a signal ends the job
    }
    const double loss_local = env ? run_step(*env, st.actions, step, s, s + 1) : st.replay->run_step(st.actions, step);
    st.trace.on = false;
    // Divergence: this rank's loss (its share, or a pipeline stage's part) or the gradient
    // elements its optimizer consumed (Backend::take_nonfinite_grads) are not finite.
    // A modelled step computes no loss (NaN) and no gradients.
    const int64_t bad_grads = be ? be->take_nonfinite_grads() : 0;
    if (env && (!std::isfinite(loss_local) || bad_grads > 0)) {
      diverged = true;
      detail = fmt::format("step {}{}: rank {} loss {}, {} non-finite gradient elements", s,
                           timed ? fmt::format(" (timed step {})", step) : std::string(" (warm-up)"), rank,
                           loss_local, bad_grads);
    }
    if (!timed) continue;
    const double loss = global_mean_loss(loss_local, st.watch, MPI_COMM_WORLD);  // reporting, outside the step
    losses.push_back(loss);
    if (o.output.empty()) continue;
    const double t = st.trace.step_end.back() - st.trace.step_start.back();
    const StepPoint p = gather_step_point(step, t, step_phases(st.trace, step), loss, st.watch, MPI_COMM_WORLD);
    if (rank == 0 && reporters) reporters->step(p);
  }
}

void warn_loop_end(const core::Log& out, const Options& o, const LoopEnd& end) {
  const int total = o.warmup + o.steps;
  if (end.why & kStopTime)
    out.warn("step_bench: --time-limit {} s reached after {} of {} steps\n", o.time_limit, end.at_step + 1, total);
  if (end.why & kStopSignal)
    out.warn("step_bench: stopped by a signal after {} of {} steps; the finished steps are saved\n",
             end.at_step + 1, total);
  if (end.why & kStopDiverged)
    out.warn("step_bench: diverged at {}; status 'diverged', exit {}\n", end.detail,
             core::code(core::ExitCode::kDiverged));
}

std::pair<results::RunStatus, int> verdict(const LoopEnd& end, const std::string& check) {
  using results::RunStatus;
  if (end.why & kStopDiverged) return {RunStatus::kDiverged, core::code(core::ExitCode::kDiverged)};
  if (end.why & kStopSignal) return {RunStatus::kKilled, core::code(core::ExitCode::kRuntime)};
  if (end.why & kStopTime) return {RunStatus::kTimeout, core::code(core::ExitCode::kRuntime)};
  if (check == "fail") return {RunStatus::kFailed, core::code(core::ExitCode::kCheckFailed)};
  return {RunStatus::kOk, core::code(core::ExitCode::kOk)};
}

}  // namespace meshbench::parallel
