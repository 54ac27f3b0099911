// The front half of a step_bench run on every rank, before any step is timed: signals, the
// hang watchdog, the outputs claimed (one writer, never overwritten), the threads per rank,
// the compute backend, the plan's memory against what the ranks have, the run's provenance,
// and the header lines. Every refusal is agreed by all ranks (exit 2, no rank left waiting).
// Not here: the groups and the sharded model (setup.hpp), the timed steps (timed.hpp).
#pragma once

#include <memory>
#include <string>

#include "comm/clock_sync.hpp"
#include "comm/topology.hpp"
#include "core/log.hpp"
#include "core/op_watch.hpp"
#include "kernels/backend.hpp"
#include "report/step_reporter.hpp"
#include "results/output_path.hpp"
#include "results/run_context.hpp"
#include "step/options.hpp"
#include "step/peak.hpp"
#include "step/setup.hpp"

namespace meshbench::parallel {

// SIGTERM (Slurm's time limit, scancel), SIGINT and SIGHUP stop the run at the next step
// boundary: status 'killed', exit 3, the finished steps kept; a run stuck before it gets there
// is ended after results::kStopGraceS (results/stop_signal.hpp). A second signal takes its
// default action.
void install_signal_handlers(int rank);
bool signal_received();

// --op-timeout: the watchdog of every rank; restarted with the output file once it exists.
struct Watchdog {
  Watchdog(int rank_, double timeout_) : active(timeout_ > 0 ? &watch : nullptr), rank(rank_), timeout(timeout_) {}
  core::OpWatch watch;  // outlives every communicator that reports to it
  core::OpWatch* active;  // null without --op-timeout
  int rank;
  double timeout;
  void start(const std::string& output, const std::string& run_id);
  void stop() {
    if (active) watch.stop();
  }
};

// Before set-up, rank 0 claims -O (results/output_path.hpp) and checks that --trace and
// --export can be written; a problem is exit 2 on every rank.
void claim_outputs(const Options& o, results::OutputClaim& claim, int rank);

// The threads of each rank (OpenMP and OpenBLAS): --threads; else OMP_NUM_THREADS; else the
// cores the rank may run on shared among the ranks on its host (a rank bound to its own cores,
// as srun --cpu-bind does, keeps them all), at least 1. Oversubscribed: more threads than
// cores on some host, flagged in the header, the run's attributes and the report.
struct Threads {
  int n = 1;
  std::string rule;
  bool oversubscribed = false;  // on any host
};
Threads set_threads(const Options& o, const comm::Topology& topo, int rank);

// The compute backend of this rank: the CPU, or one GPU (local rank modulo the node's GPUs).
struct Compute {
  std::unique_ptr<Backend<float>> gpu_backend;  // declared before anything that uses it
  Backend<float>* backend = nullptr;
  bool gpu = false;
  int device = -1;
  std::string gpu_name = "none";
  Precision prec = Precision::kFp32;
};
// --device cuda: GPU local_rank % devices, local_rank the rank's place on its real host (not
// --ranks-per-node's emulated one).
void make_compute(Compute& cp, const Options& o, int local_rank);

// Before the model is allocated: the plan's analytic memory (plan_memory, what --plan-only
// prints) against what each rank can have, the ranks of a host sharing its memory (or each
// its GPU's). --check adds the single-rank reference model on rank 0. A plan that does not fit
// is exit 2 on every rank, with the estimate; one that fits by this count can still run out
// (the estimate leaves out the MPI library, BLAS workspaces and the allocator), which ends the
// run with a named error instead (step_bench.cpp).
// --compute modelled (`modelled`: its costs): the communication buffers the replay allocates
// (replay_buffer_bytes) instead, the model allocating nothing; a plan whose buffers do not fit is
// exit 2 with the size it would need.
void check_memory(const Options& o, const Plan& plan, const Compute& cp, const comm::Topology& topo, int rank,
                  const Costs* modelled = nullptr);

// The run's provenance; created before timing with the file, so a killed run leaves the
// finished steps readable.
results::RunContext make_context(const Options& o, const Plan& plan, const Compute& cp, int argc, char** argv,
                                 const comm::Topology& topo);

// Everything a rank sets up before it times a step.
struct Launched {
  comm::Topology topo;
  Threads threads;
  Compute cp;  // before the set-up that uses its backend
  Setup st;
  double setup_s[2] = {0, 0};  // the slowest rank's set-up and communicator creation, seconds
};

// Topology, threads, compute backend, the memory check, then the groups and the sharded model
// (setup.hpp); watched by the hang watchdog; the set-up times are the slowest rank's.
// `costs` (--compute modelled): the groups and the replay without a model (make_modelled_setup).
// On --device cuda without --attention it sets plan.flash and plan.attention_rule from a
// set-up timing of both attentions (kernels/attention_choice.hpp; issue 44, item 9).
void launch(Launched& l, const Options& o, Plan& plan, int rank, Watchdog& wd, std::unique_ptr<Costs> costs = nullptr);

// Clock offsets against rank 0 for the trace's aligned timelines (into `clock`); returns the
// run's origin on rank 0's clock.
double align_clocks(const comm::Topology& topo, StepReporters* reps, comm::ClockOffset& clock);

// The header: the model, device, threads, parameters and FLOPs, the plan and its schedule.
void print_header(const core::Log& out, const Options& o, const Plan& plan, const Setup& st, const Compute& cp,
                  const comm::Topology& topo, const Threads& threads);
void print_peak(const core::Log& out, const Compute& cp, const Peak& peak, double datasheet);

}  // namespace meshbench::parallel
