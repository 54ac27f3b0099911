#include "report/step_console.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/stats.hpp"
#include "core/units.hpp"
#include "metrics/summary.hpp"

namespace meshbench::parallel {

namespace {
std::vector<double> column(const std::vector<std::vector<double>>& m, size_t r) {
  std::vector<double> v;
  for (const auto& row : m) v.push_back(row[r]);
  return v;
}

// The time split (metrics.hpp): each rank's mean step = compute + exposed per dim + bubble + other.
void print_time_split(const core::Log& out, const StepRecord& r) {
  const StepSummary& s = r.summary;
  std::vector<std::string> cats = {"compute"};
  for (const SplitRow& x : r.split)
    if (std::string(x.category).rfind("exposed.", 0) == 0 &&
        std::find(cats.begin(), cats.end(), std::string(x.category)) == cats.end())
      cats.push_back(x.category);
  std::sort(cats.begin() + 1, cats.end());
  cats.push_back("bubble");
  cats.push_back("other");
  out.out("  time per rank and step, ms (mean over the timed steps; step = the sum of the rest):\n");
  std::string head = fmt::format("  {:>4} {:>9}", "rank", "step");
  for (const std::string& c : cats) head += fmt::format(" {:>12}", c);
  out.out("{}\n", head);
  for (int k = 0; k < r.ranks; ++k) {
    std::map<std::string, double> v;
    for (const SplitRow& x : r.split)
      if (x.rank == k) v[x.category] = x.seconds;
    std::string line = fmt::format("  {:>4} {:>9.3f}", k, v["step"] * 1e3);
    for (const std::string& c : cats) line += fmt::format(" {:>12.3f}", v[c] * 1e3);
    out.out("{}{}\n", line, k == s.straggler_rank && r.ranks > 1 ? "  straggler" : "");
  }
}

// The phases per rank (medians over the timed steps), with each rank's FLOP/s and MFU.
void print_phases(const core::Log& out, const StepRecord& r) {
  out.out("  phases per rank, ms (median over the timed steps):\n");
  out.out("  {:>4} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>6}\n", "rank", "step", "forward",
          "backward", "grad_sync", "optimizer", "GFLOP/s", "MFU");
  for (int k = 0; k < r.ranks; ++k) {
    std::array<std::vector<double>, 4> ph;
    for (const auto& st : r.phases)
      for (size_t i = 0; i < 4; ++i) ph[i].push_back(st[static_cast<size_t>(k)][i]);
    const double st = core::median(column(r.step_time, static_cast<size_t>(k)));
    const double fl = r.flops_per_step / r.ranks / st;
    out.out("  {:>4} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>9.2f} {:>5.1f}%\n", k, st * 1e3,
            core::median(ph[0]) * 1e3, core::median(ph[1]) * 1e3, core::median(ph[2]) * 1e3,
            core::median(ph[3]) * 1e3, fl / 1e9, 100 * fl / r.peak[static_cast<size_t>(k)]);
  }
}

// Communication per (dim, kind), summed over ranks, per rank and step, beside the plan's bytes.
void print_comm(const core::Log& out, const StepRecord& r) {
  // Per (dim, kind), summed over ranks, per rank and step.
  std::map<std::pair<std::string, std::string>, CommRow> agg;
  for (const CommRow& c : r.comm) {
    CommRow& a = agg[{c.dim, c.kind}];
    a.calls += c.calls;
    a.bytes += c.bytes;
    a.wire_bytes += c.wire_bytes;
    a.busy_s += c.busy_s;
    a.exposed_s += c.exposed_s;
  }
  const double per = 1.0 / (double(std::max(1, r.steps)) * r.ranks);
  out.out("  communication per rank and step: {:>4} {:<14} {:>6} {:>12} {:>12} {:>12} {:>10} {:>10} {:>8}\n", "dim",
          "kind", "calls", "payload B", "wire B", "analytic B", "busy ms", "exposed ms", "exposed");
  for (const auto& [key, a] : agg) {
    const AnalyticBytes* want = nullptr;
    for (const AnalyticBytes& x : r.analytic)
      if (x.dim == key.first && x.kind == key.second) want = &x;
    const bool match = want && a.bytes == expected_bytes(*want, r.steps, r.ranks);
    out.out("  {:>36} {:<14} {:>6.1f} {:>12.0f} {:>12.0f} {:>12} {:>10.3f} {:>10.3f} {:>7.1f}%{}\n", key.first,
            key.second, static_cast<double>(a.calls) * per, static_cast<double>(a.bytes) * per, a.wire_bytes * per,
            want ? fmt::format("{:.0f}", want->wire) : std::string("-"), a.busy_s * per * 1e3,
            a.exposed_s * per * 1e3, a.busy_s > 0 ? 100 * a.exposed_s / a.busy_s : 0.0,
            match ? "" : "  MISMATCH: measured payload differs from the plan's");
  }
}

// Pipeline parallel: each rank's stored activations and bubble beside the theory.
void print_pipeline(const core::Log& out, const StepRecord& r) {
  out.out("  pipeline per rank: {:>4} {:>10} {:>14} {:>8} {:>8} {:>10} {:>12}\n", "rank", "peak held",
          "peak act. MiB", "bubble", "theory", "recv wait", "recv xfer ms");
  for (const PipelineRow& p : r.pipeline)
    out.out("  {:>23} {:>10} {:>14.2f} {:>7.1f}% {:>7.1f}% {:>8.3f}ms {:>12.3f}\n", p.rank, p.peak_held,
            double(p.peak_activation_bytes) / (1024.0 * 1024.0), 100 * p.bubble, 100 * p.bubble_theory,
            p.recv_wait_s * 1e3, p.recv_transfer_s * 1e3);
}

// --predict: the step model's figures beside the measured ones (docs/predict.md), each error
// pred / measured - 1. Exposed per dimension: the mean over ranks, predicted and measured (the
// time split's, as scripts/report shows it).
void print_predicted(const core::Log& out, const StepRecord& r) {
  const PredictedRecord& p = r.predicted;
  const StepSummary& s = r.summary;
  auto err = [](double pred, double meas) {
    return meas > 0 && std::isfinite(pred) ? fmt::format("{:+.1f}%", 100 * (pred / meas - 1)) : std::string("-");
  };
  out.out("  predicted ({}{}{}):\n", p.calibration, p.fabric.empty() ? "" : ", fabric ", p.fabric);
  out.out("    {:<22} {:>12} {:>12} {:>8}\n", "", "predicted", "measured", "error");
  out.out("    {:<22} {:>9.3f} ms {:>9.3f} ms {:>8}\n", "step time", p.step_time_s * 1e3, s.step_time_median * 1e3,
          err(p.step_time_s, s.step_time_median));
  out.out("    {:<22} {:>12.1f} {:>12.1f} {:>8}\n", "tokens/s", p.tokens_per_s, s.tokens_per_s,
          err(p.tokens_per_s, s.tokens_per_s));
  if (!r.pipeline.empty())
    out.out("    {:<22} {:>11.1f}% {:>11.1f}% {:>8}\n", "bubble", 100 * p.bubble, 100 * s.bubble_measured,
            err(p.bubble, s.bubble_measured));
  for (const PredictedExposed& e : p.exposed) {
    double meas = 0;
    const std::string cat = std::string("exposed.") + e.dim;
    for (const SplitRow& x : r.split)
      if (cat == x.category) meas += x.seconds / r.ranks;
    out.out("    {:<22} {:>9.3f} ms {:>9.3f} ms {:>8}\n", cat, e.seconds * 1e3, meas * 1e3, err(e.seconds, meas));
  }
  if (p.extrapolated) out.out("    extrapolated: {}\n", p.extrapolated_what);
  if (!p.notes.empty()) out.out("    model: {}\n", p.notes);
}

}  // namespace

void print_step_report(const core::Log& out, const StepRecord& r) {
  const StepSummary& s = r.summary;
  out.out("  step time median {:.3f} ms (min {:.3f}, p99 {:.3f}; slowest rank per step) over {} steps after {} warm-up\n",
          s.step_time_median * 1e3, s.step_time_min * 1e3, s.step_time_p99 * 1e3, r.steps, r.warmup);
  print_time_split(out, r);
  print_phases(out, r);
  if (!r.comm.empty()) print_comm(out, r);
  if (!r.pipeline.empty()) print_pipeline(out, r);
  // a modelled run (--compute modelled) measured no GEMM peak: its MFU is the datasheet's only
  const std::string measured = std::isnan(s.peak_measured_flops)
                                   ? std::string("n/a (no GEMM ran: modelled compute)")
                                   : fmt::format("{:.1f}% of the measured GEMM peaks ({:.2f} GFLOP/s over {} ranks)",
                                                 100 * s.mfu_measured_peak, s.peak_measured_flops / 1e9, r.ranks);
  out.out("  tokens/s {:.1f}, {:.2f} GFLOP/s, MFU {}; datasheet MFU {}\n", s.tokens_per_s, s.model_flops_per_s / 1e9,
          measured, std::isnan(s.mfu_datasheet) ? std::string("n/a") : fmt::format("{:.1f}%", 100 * s.mfu_datasheet));
  if (r.hardware_flops_per_step > r.flops_per_step)  // --recompute: HFU beside MFU, the same peaks
    out.out("  hardware FLOPs (recomputation included) {:.4g} per step: {:.2f} GFLOP/s, HFU {:.1f}% of the measured "
            "GEMM peaks\n",
            r.hardware_flops_per_step, r.hardware_flops_per_step / s.step_time_median / 1e9,
            100 * r.hardware_flops_per_step / s.step_time_median / s.peak_measured_flops);
  if (std::isnan(s.loss_first) && std::isnan(s.loss_last))
    out.out("  loss: none (nothing computed: modelled compute)\n");
  else
    out.out("  loss {:.4f} -> {:.4f}\n", s.loss_first, s.loss_last);
  if (r.predicted.on) print_predicted(out, r);
}

void print_memory(const core::Log& out, const StepRecord& r) {
  out.out("  memory, peak per category (rank 0)  measured     analytic\n");
  for (const auto& m : r.memory)
    out.out("    {:<16} {:>12} {:>12}\n", m.category,
            std::isnan(m.measured_bytes) ? std::string("not measured") : core::human_bytes(m.measured_bytes),
            std::isnan(m.analytic_bytes) ? std::string("-") : core::human_bytes(m.analytic_bytes));
  const double meg = r.megatron_activation_bytes;
  for (const auto& m : r.memory)
    if (m.category == "activations" && !std::isnan(m.measured_bytes))
      out.out("    activations beside Megatron's {} = {} (16-bit with dropout masks; this engine keeps fp32, no "
              "dropout): measured/Megatron {:.2f}\n",
              r.megatron_activation_formula, core::human_bytes(meg), m.measured_bytes / meg);
}

void print_profile(const core::Log& out, const StepRecord& r) {
  out.out("  op profile (rank 0, per step, over timed steps):\n");
  for (const auto& [op, per] : r.op_profile)
    out.out("    {:<14} {:9.3f} ms  {:5.1f}%\n", op, per * 1e3, 100 * per / r.summary.step_time_median);
}

void print_moe(const core::Log& out, const StepRecord& r, const std::string& shape) {
  const MoeSummary& m = r.moe;
  out.out("  moe: {}: {} assignments over the timed steps, {} dropped ({:.2f}%), busiest expert {} rows in one block\n",
          shape, m.routed, m.dropped, 100 * m.drop_fraction(), m.worst_expert);
}

void print_ep(const core::Log& out, const EpImbalance& e) {
  out.out("  expert parallel per rank and step (rows received by its experts; seconds, forward + backward):\n");
  out.out("  {:>4} {:>14} {:>11} {:>11} {:>11} {:>11}\n", "rank", "rows received", "expert ms", "dispatch ms",
          "combine ms", "counts ms");
  for (size_t r = 0; r < e.ranks.size(); ++r) {
    const auto& x = e.ranks[r].v;
    out.out("  {:>4} {:>14.1f} {:>11.3f} {:>11.3f} {:>11.3f} {:>11.3f}\n", r, x[0], x[1] * 1e3, x[2] * 1e3,
            x[3] * 1e3, x[4] * 1e3);
  }
  const auto& w = e.worst_over_mean;
  out.out("  {:>4} {:>14.3f} {:>11.3f} {:>11.3f} {:>11.3f} {:>11.3f}   (worst rank / mean)\n", "w/m", w[0], w[1],
          w[2], w[3], w[4]);
}

void ConsoleStepReporter::record(const StepRecord& r) {
  if (r.moe.on) print_moe(out_, r, moe_shape_);
  if (!r.ep.ranks.empty()) print_ep(out_, r.ep);
  if (r.steps > 0) print_step_report(out_, r);
  print_memory(out_, r);
  if (!r.op_profile.empty()) print_profile(out_, r);
}

}  // namespace meshbench::parallel
