// step_bench: transformer training steps (GPT forward, backward, AdamW) on one rank or many
// (docs/step_bench.md). options -> plan -> set-up (launch.hpp, setup.hpp) -> --check ->
// timed steps (timed.hpp) -> metrics, gathered (metrics/) -> reporters (report/), from
// outcome.hpp. Every rank runs the same path; only rank 0 writes.
#include <mpi.h>

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "comm/agree.hpp"
#include "comm/finalize.hpp"
#include "comm/mesh.hpp"
#include "core/error.hpp"
#include "core/op_watch.hpp"
#include "core/timer.hpp"
#include "results/stop_signal.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "model/export.hpp"
#include "step/check.hpp"
#include "step/launch.hpp"
#include "step/outcome.hpp"
#include "step/plan_only.hpp"
#include "step/rules.hpp"

namespace mb = meshbench;
using namespace mb::parallel;
using mb::core::ExitCode;

namespace {

// --export: one single-rank step for scripts/torch_reference.py.
int run_export(const Options& o, Gpt<float>& model, const mb::core::Log& out) {
  const GptConfig& c = o.model;
  std::vector<int32_t> tok(static_cast<size_t>(c.tokens())), tgt(tok.size());
  synthetic_batch(tok.data(), tgt.data(), data_kind(o), o.seed, 0, 0, c.micro_batch, c.seq, c.vocab);
  ExportedStep s = run_export_step(model, tok.data(), tgt.data(), o.adam);
  write_export(o.export_dir, model, s, o.adam);
  out.always("step_bench: exported one step of {} (loss {:.6f}) to {}\n", describe(c), s.loss, o.export_dir);
  return mb::core::code(ExitCode::kOk);
}

// make_plan for the launched ranks; a mesh that needs more ranks than a lone process has
// (step_bench run without mpiexec) says how to launch it.
Plan plan_for_launch(const Options& o, int world) {
  try {
    return make_plan(o, world);
  } catch (const mb::core::UsageError& e) {
    if (world != 1) throw;
    const mb::comm::MeshSpec m = mb::comm::parse_mesh(o.mesh);
    auto at_least_1 = [](int d) { return std::max(1, d); };
    const int need = std::max(at_least_1(m.tp) * at_least_1(m.cp) * at_least_1(m.dp) * at_least_1(m.pp),
                              at_least_1(m.ep) * at_least_1(m.etp) * at_least_1(m.pp));
    if (need <= 1) throw;
    throw mb::core::UsageError(fmt::format("{}; this process is 1 rank: launch it with mpiexec -n {} (or srun -n {})",
                                           e.what(), need, need));
  }
}

int run(int argc, char** argv, int rank, int world, int thread_level) {
  std::optional<Options> parsed = parse_options(argc, argv);
  if (!parsed) return mb::core::code(ExitCode::kOk);
  const Options& opts = *parsed;
  if (opts.plan_only)  // main() answers --plan-only before MPI starts; another spelling got here
    throw mb::core::UsageError("--plan-only: write it as the flag --plan-only (or MESHBENCH_STEP_PLAN_ONLY=1)");
  Plan plan = plan_for_launch(opts, world);  // launch() may choose the attention (issue 44, item 9)
  if (rank == 0)  // legal but degenerate: said once, even with --quiet (step/rules.hpp)
    for (const std::string& n : plan_notes(plan)) std::fprintf(stderr, "step_bench: note: %s\n", n.c_str());
  const bool modelled = opts.compute == "modelled";
  std::optional<Prediction> predicted;  // every rank reads it: a bad file is exit 2 on all
  std::unique_ptr<Costs> costs;
  if (!opts.predict.empty()) {
    costs = read_costs(opts.predict, opts.predict_fabric, plan);
    predicted = predict_step(plan, *costs);
  }
  if (plan.progress == Progress::kThread && thread_level < MPI_THREAD_MULTIPLE)
    throw mb::core::UsageError("--progress thread: this MPI does not provide MPI_THREAD_MULTIPLE");
  mb::results::OutputClaim claim;
  claim_outputs(opts, claim, rank);
  const mb::core::Log out(rank, opts.quiet);
  Watchdog wd(rank, opts.op_timeout);
  wd.start("", "");  // the set-up is watched too; restarted with the output file below
  Launched launched;
  launch(launched, opts, plan, rank, wd, modelled ? std::move(costs) : nullptr);
  Setup& setup = launched.st;
  if (!opts.export_dir.empty()) return run_export(opts, *setup.model, out);
  print_header(out, opts, plan, setup, launched.cp, launched.topo, launched.threads);
  out.out("  set-up {:.3f} s (topology, communicators, {}; slowest rank), of which communicators {:.3f} s\n",
          launched.setup_s[0], modelled ? "communication buffers" : "model", launched.setup_s[1]);
  RunResult result;
  result.predicted = predicted;
  Peak peak;
  if (modelled) {  // no GEMM runs here: MFU is against the described GPU's peak (a cluster), else none
    peak.best = peak.median = NAN;
    const Cluster* cl = setup.costs->cluster();
    result.datasheet = cl ? cl->gpu.peak_bf16_flops : NAN;
  } else {
    mb::core::set_phase("the peak GEMM's measurement");
    peak = measure_peak(opts.model, launched.cp.gpu, launched.cp.prec, launched.cp.device);
    result.datasheet = launched.cp.gpu ? cuda::datasheet_peak(launched.cp.gpu_name, launched.cp.prec) : NAN;
    print_peak(out, launched.cp, peak, result.datasheet);
  }

  std::optional<StepEnv<float>> env;
  if (setup.model) {
    env.emplace(StepEnv<float>{*setup.model, setup.sync.get(), setup.trace, plan, data_kind(opts), opts.seed, setup.dp_rank, opts.adam});
    env->pipe = setup.pipe ? &*setup.pipe : nullptr;
    env->watch = setup.watch;
    mb::core::set_phase("--check against the single-rank reference");
    result.check = run_check(opts, setup, *env, out, result.check_rows);
  } else {
    result.check = "off";
  }
  mb::results::RunContext ctx = make_context(opts, plan, launched.cp, argc, argv, launched.topo);
  std::string problem;
  std::unique_ptr<StepReporters> reps = make_reporters(opts, launched, peak, result.datasheet, ctx, claim.appending(), out, rank, problem);
  mb::comm::agree_on_fault(MPI_COMM_WORLD, problem);  // a results file that cannot start ends every rank
  mb::results::sync_from_root(ctx, MPI_COMM_WORLD);   // the run id, made unique in the file
  result.run_id = ctx.run_id;
  if (!opts.output.empty()) wd.start(opts.output, ctx.run_id);
  result.t_origin = align_clocks(launched.topo, reps.get(), result.clock);
  if (setup.model) setup.model->set_profiling(opts.profile);
  const double loop_start = mb::core::now_seconds();
  result.end = timed_steps(opts, env ? &*env : nullptr, setup, reps.get(), result.losses);
  const double loop_s = mb::core::now_seconds() - loop_start;
  mb::results::stop_finishing();  // a signal from here on waits for the summary (results/stop_signal.hpp)
  mb::core::set_phase("writing the results");
  if (result.end.why & kStopWrite)
    mb::comm::agree_on_fault(MPI_COMM_WORLD, reps ? reps->error() : std::string("the results file could not be written"));
  warn_loop_end(out, opts, result.end);
  result.peak = modelled ? NAN : peak_after(opts, launched.cp, peak, loop_s, reps.get(), out);
  std::string write_error;
  const int rc = report_run(opts, setup, result, launched.topo, rank, reps.get(), out, write_error);
  mb::comm::agree_on_fault(MPI_COMM_WORLD, write_error);  // rank 0's write error ends every rank, exit 3
  wd.stop();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (plan_only_requested(argc, argv)) return plan_only_main(argc, argv);  // no MPI (plan_only.hpp)
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  mb::core::set_fault_identity(rank, mb::comm::host_name());
  install_signal_handlers(rank);
  int rc = 0;
  try {
    rc = run(argc, argv, rank, size, provided);
  } catch (const mb::core::UsageError& e) {
    if (rank == 0) std::fprintf(stderr, "step_bench: error: %s\n", e.what());
    rc = mb::core::code(ExitCode::kUsage);
  } catch (const mb::core::OutputFault& e) {  // every rank agreed to stop here: none waits in a collective
    if (rank == 0) std::fprintf(stderr, "step_bench: error: %s\n", e.what());
    rc = mb::core::code(ExitCode::kRuntime);
  } catch (const mb::core::RuntimeFault& e) {
    std::fprintf(stderr, "step_bench: rank %d: %s\n", rank, e.what());
    rc = mb::core::code(ExitCode::kRuntime);
  } catch (const std::bad_alloc&) {
    mb::core::fatal_runtime("memory allocation", "-",
                            "out of memory (the plan passed the memory check, which leaves out MPI, BLAS and the "
                            "allocator's own use: lower the model or raise the parallel degrees)");
  }
  mb::results::stop_done();
  // Results are on disk by now; a finalize that hangs (MPICH 4.0 over TCP) must not keep the job.
  if (signal_received() && rc == mb::core::code(ExitCode::kRuntime)) mb::comm::end_signalled_job(rank, rc, "step_bench");
  mb::comm::finalize_with_deadline(rank, rc, "step_bench");
  return rc;
}
