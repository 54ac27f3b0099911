#include "step/outcome.hpp"

#include "results/h5.hpp"

#include <fmt/core.h>

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "expert_parallel/plan.hpp"
#include "kernels/flops.hpp"
#include "metrics/gather.hpp"
#include "metrics/summary.hpp"
#include "pipeline_parallel/plan.hpp"
#include "predict/replay.hpp"
#include "report/step_console.hpp"
#include "report/step_jsonl.hpp"
#include "report/perfetto.hpp"
#include "report/step_h5.hpp"
#include "results/output_path.hpp"
#include "step/attributes.hpp"

namespace meshbench::parallel {

std::unique_ptr<StepReporters> make_reporters(const Options& o, const Launched& l, const Peak& peak, double datasheet,
                                              results::RunContext& ctx, bool appending, const core::Log& out,
                                              int rank, std::string& problem) {
  std::unique_ptr<StepReporters> reps;
  if (rank == 0) {
    reps = std::make_unique<StepReporters>();
    reps->add(std::make_unique<ConsoleStepReporter>(out, moe_shape(o.model)));
    if (!o.trace_file.empty()) reps->add(std::make_unique<PerfettoStepReporter>(o.trace_file), "--trace");
    try {
      if (!o.output.empty()) {
        const Plan& plan = *l.st.plan;
        auto h5 = std::make_unique<StepH5>(
            o.output, appending, ctx, plan.world,
            step_attributes(o, plan, l.st.model.get(), omp_get_max_threads(), step_flops(o.model), peak, datasheet,
                            l.cp.gpu_name, l.st),
            std::vector<std::string>(kPhaseNames.begin(), kPhaseNames.end()), describe_groups(l.st, l.topo));
        reps->add(std::move(h5));
        reps->add(std::make_unique<JsonlStepReporter>(results::jsonl_path(o.output), ctx.run_id), "JSON lines");
        reps->add_step_attrs({{"setup_time_s", l.setup_s[0]}, {"comm_setup_time_s", l.setup_s[1]},
                              {"threads_rule", l.threads.rule}, {"threads_oversubscribed", l.threads.oversubscribed}});
        problem = reps->error();
      }
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  return reps;
}

double peak_after(const Options& o, const Compute& cp, const Peak& before, double loop_s, StepReporters* reps,
                  const core::Log& out) {
  const char* what = cp.gpu ? "cuBLAS GEMM" : "SGEMM";
  const bool again = loop_s >= kPeakAgainS;
  const std::string rule = fmt::format("measured again after the timed steps when they ran for at least {:g} s "
                                       "(rank 0's ran {:.3f} s); MFU uses the higher", kPeakAgainS, loop_s);
  const double after = again ? measure_peak(o.model, cp.gpu, cp.prec, cp.device).best : NAN;
  if (again)
    out.out("  {} peak again after the steps: best {:.2f} GFLOP/s (before {:.2f}); MFU uses the higher\n", what,
            after / 1e9, before.best / 1e9);
  else
    out.out("  {} peak not measured again: the timed steps took {:.3f} s, under {:g} s\n", what, loop_s, kPeakAgainS);
  const double used = again ? std::max(before.best, after) : before.best;
  if (reps)
    reps->add_step_attrs({{"peak_measured_flops_before", before.best}, {"peak_measured_flops_after", after},
                          {"peak_measured_flops", used}, {"peak_again_rule", rule}});
  return used;
}

std::vector<AnalyticBytes> plan_analytic(const Plan& plan, const Setup& st, int steps) {
  if (st.replay) return st.replay->analytic();
  std::vector<AnalyticBytes> a;
  auto add = [&](const std::vector<AnalyticBytes>& v) { a.insert(a.end(), v.begin(), v.end()); };
  if (st.sync) add(st.sync->analytic());
  const Gpt<float>& m = *st.model;
  int layers = 0, moe_layers = 0;  // this rank's blocks (a pipeline stage holds some), and its MoE ones
  for (int k = 0; k < m.num_chunks(); ++k)
    for (int l = m.chunk_layers(k).first; l < m.chunk_layers(k).second; ++l) {
      ++layers;
      moe_layers += plan.model.is_moe(l) ? 1 : 0;
    }
  add(layer_analytic(plan, 4, layers, moe_layers, m.first_stage(), m.last_stage()));
  add(ep_analytic(plan.model, plan.degrees.ep, m.moe().totals().ep, steps, 4));
  if (plan.experts_placed()) add(etp_analytic(plan.model, plan.degrees.ep, plan.degrees.etp, m.moe().totals().ep, steps, 4));
  if (st.pipe) add(pipeline_analytic(*st.pipe, plan));
  return a;
}

namespace {

// This rank's part of the record (gather.hpp), its metrics into `rm` and `pipe`.
RankPart rank_part(const Options& o, const Setup& st, const RunResult& r, int rank, RankMetrics& rm,
                   PipelineRow& pipe) {
  const Plan& plan = *st.plan;
  rm = measure_rank(st.trace, rank, r.clock.offset_s, MPI_COMM_WORLD, st.pipe ? &pipe : nullptr,
                    bubble_theory(plan.degrees.pp, plan.micro_batches, plan.vpp));
  RankPart p;
  p.metrics = &rm;
  p.peak = r.peak;
  p.analytic = plan_analytic(plan, st, static_cast<int>(rm.step_time.size()));
  p.pipeline = st.pipe ? &pipe : nullptr;
  p.memory = memory_rows(st.model.get(), plan, st.actions, st.pipe ? st.pipe->rank : 0);
  if (o.profile || !o.trace_file.empty()) p.events = event_rows(st.trace, rank, r.t_origin, r.clock.offset_s);
  p.slots = slot_rows(st.trace, rank, r.t_origin, r.clock.offset_s);
  p.passes = pass_rows(st.trace, rank, r.t_origin, r.clock.offset_s);
  p.clock = r.clock;
  if (st.model) p.moe = st.model->moe().totals();
  p.moe_on = plan.model.experts > 0;
  p.tp = plan.degrees.tp;
  p.ep = plan.degrees.ep;
  return p;
}

// Rank 0's fields of the record that no gather brings.
void describe_run(StepRecord& rec, const Options& o, const Setup& st, const RunResult& r,
                  const comm::Topology& topo) {
  const Plan& plan = *st.plan;
  rec.model = describe(o.model);
  rec.plan = describe(plan);
  if (st.replay) rec.plan += fmt::format(" [modelled compute: {}]", st.costs->source());  // JSON lines, summary
  rec.tag = o.tag;
  rec.warmup = o.warmup;
  rec.threads = omp_get_max_threads();
  rec.global_tokens = static_cast<double>(plan.global_tokens());
  rec.flops_per_step = step_flops(o.model).total() * plan.micro_batches * plan.degrees.dp;
  rec.hardware_flops_per_step = hardware_flops_per_step(plan, step_flops(o.model));
  rec.loss = r.losses;
  rec.check = r.check;
  rec.check_rows = r.check_rows;
  rec.megatron_activation_bytes = megatron_activation_bytes_per_layer(plan) * plan.model.layers;
  rec.megatron_activation_formula = megatron_activation_formula(plan) + " x L";
  for (const auto& p : topo.ranks) rec.hosts.push_back(p.host);
  rec.oversubscribed = topo.oversubscribed;
  if (o.profile)
    for (int i = 0; i < static_cast<int>(Op::kCount); ++i)
      rec.op_profile.emplace_back(op_name(static_cast<Op>(i)),
                                  st.model->op_seconds()[i] / std::max(1, rec.steps));
  if (r.end.why & kStopDiverged) rec.diverged = r.end.detail;
  if (r.predicted) {
    const Prediction& p = *r.predicted;
    PredictedRecord& q = rec.predicted;
    q.on = true;
    q.step_time_s = p.step_time_s;
    q.tokens_per_s = p.tokens_per_s;
    q.bubble = p.bubble;
    q.extrapolated = p.extrapolated;
    q.calibration = p.calibration;
    q.fabric = p.fabric;
    for (const std::string& w : p.extrapolated_what) q.extrapolated_what += (q.extrapolated_what.empty() ? "" : "; ") + w;
    for (const std::string& n : p.notes) q.notes += (q.notes.empty() ? "" : "; ") + n;
    for (const auto& [dim, v] : p.exposed_s) {
      PredictedExposed e;
      results::put_fixed(e.dim, dim);
      e.seconds = v;
      q.exposed.push_back(e);
    }
    for (const RankPrediction& x : p.per_rank)
      q.per_rank.push_back({x.pp_rank, x.step_s, x.compute_s, x.bubble_s, x.exposed_total()});
  }
}

}  // namespace

int report_run(const Options& o, const Setup& st, const RunResult& r, const comm::Topology& topo, int rank,
               StepReporters* reporters, const core::Log& out, std::string& write_error) {
  RankMetrics rm;
  PipelineRow pipe;
  StepRecord rec;
  gather_record(rec, rank_part(o, st, r, rank, rm, pipe), MPI_COMM_WORLD);
  const auto [status, rc] = verdict(r.end, r.check);
  if (reporters) {  // rank 0
    describe_run(rec, o, st, r, topo);
    if (rec.steps > 0) rec.summary = summarize(rec, r.datasheet);
    rec.status = results::name(status);
    reporters->record(rec);
    reporters->finish(status);
    write_error = reporters->error();
    if (write_error.empty() && !o.trace_file.empty())
      out.always("step_bench: wrote the trace to {} (open in ui.perfetto.dev)\n", o.trace_file);
    if (write_error.empty() && !o.output.empty())
      out.always("step_bench: wrote run {} to {} and {} (status {})\n", r.run_id, o.output,
                 results::jsonl_path(o.output), rec.status);
    if (rec.steps > 0 && st.replay)
      out.always("step_bench: median {:.3f} ms/step, {:.0f} tokens/s with MODELLED compute from {}{}\n",
                 rec.summary.step_time_median * 1e3, rec.summary.tokens_per_s, st.costs->source(),
                 std::isfinite(rec.summary.mfu_datasheet)
                     ? fmt::format(", MFU {:.1f}% of the described GPU's bf16 peak", 100 * rec.summary.mfu_datasheet)
                     : std::string());
    else if (rec.steps > 0)
      out.always("step_bench: median {:.3f} ms/step, {:.0f} tokens/s, {:.2f} GFLOP/s, MFU {:.1f}% (measured GEMM "
                 "peak), check {}\n",
                 rec.summary.step_time_median * 1e3, rec.summary.tokens_per_s, rec.summary.model_flops_per_s / 1e9,
                 100 * rec.summary.mfu_measured_peak, r.check);
  }
  return rc;
}

}  // namespace meshbench::parallel
