#include "metrics/report.hpp"

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/stats.hpp"

namespace meshbench::parallel {

namespace {
std::vector<double> column(const std::vector<std::vector<double>>& m, size_t r) {
  std::vector<double> v;
  for (const auto& row : m) v.push_back(row[r]);
  return v;
}
}  // namespace

uint64_t expected_bytes(const AnalyticBytes& a, int steps, int ranks) {
  if (a.total > 0) return a.total;  // data-dependent (expert parallel): exact over the run
  const uint64_t per_step = a.all_ranks > 0 ? a.all_ranks : a.payload * static_cast<uint64_t>(ranks);
  return per_step * static_cast<uint64_t>(steps);
}

std::vector<AnalyticBytes> sum_over_ranks(const std::vector<AnalyticBytes>& local, int ranks, MPI_Comm world) {
  struct Row {
    char dim[16], kind[24];
    uint64_t payload, total;
    double wire;
  };
  std::vector<Row> mine;
  for (const AnalyticBytes& a : local) {
    Row r{};
    std::snprintf(r.dim, sizeof r.dim, "%s", a.dim.c_str());
    std::snprintf(r.kind, sizeof r.kind, "%s", a.kind.c_str());
    r.payload = a.payload;
    r.total = a.total;
    r.wire = a.wire;
    mine.push_back(r);
  }
  std::map<std::pair<std::string, std::string>, AnalyticBytes> sum;
  for (const Row& r : gather_rows(mine, world)) {
    AnalyticBytes& a = sum[{r.dim, r.kind}];
    a.dim = r.dim;
    a.kind = r.kind;
    a.all_ranks += r.payload;
    a.total += r.total;
    a.wire += r.wire / ranks;  // per rank, the mean
  }
  std::vector<AnalyticBytes> out;
  for (auto& [k, a] : sum) {
    a.payload = a.all_ranks / static_cast<uint64_t>(ranks);
    out.push_back(a);
  }
  return out;
}

StepSummary summarize(const StepRecord& r, const std::string& check, double datasheet) {
  StepSummary s{};
  std::vector<double> t;  // the step's time: its slowest rank
  for (const auto& row : r.step_time) t.push_back(*std::max_element(row.begin(), row.end()));
  s.step_time_median = core::median(t);
  s.step_time_min = core::min_of(t);
  s.step_time_p99 = core::percentile(t, 99);
  s.tokens_per_s = r.global_tokens / s.step_time_median;
  s.flops_per_step = r.flops_per_step;
  s.model_flops_per_s = r.flops_per_step / s.step_time_median;
  double peak_sum = 0;
  for (double p : r.peak) peak_sum += p;
  s.peak_measured_flops = peak_sum;
  s.mfu_measured_peak = s.model_flops_per_s / peak_sum;
  s.peak_datasheet_flops = datasheet * r.ranks;
  s.mfu_datasheet = s.model_flops_per_s / s.peak_datasheet_flops;  // NaN without an entry
  s.bubble_measured = 0;  // pipeline parallel: the mean over ranks (metrics.hpp PipelineRow)
  s.bubble_theory = 0;
  for (const PipelineRow& p : r.pipeline) {
    s.bubble_measured += p.bubble / double(r.pipeline.size());
    s.bubble_theory = p.bubble_theory;
  }
  s.loss_first = r.loss.empty() ? NAN : r.loss.front();
  s.loss_last = r.loss.empty() ? NAN : r.loss.back();
  // The straggler: the rank with the most compute (forward + backward + optimizer) per step.
  double worst = -1;
  for (int k = 0; k < r.ranks; ++k) {
    std::vector<double> c;
    for (const auto& st : r.phases) c.push_back(st[k][0] + st[k][1] + st[k][3]);
    const double med = c.empty() ? 0 : core::median(c);
    if (med > worst) {
      worst = med;
      s.straggler_rank = k;
    }
  }
  double busy = 0, exposed = 0, dp_busy = 0, dp_exposed = 0, wire = 0;
  std::map<std::pair<std::string, std::string>, uint64_t> payload;  // over ranks and steps
  for (const CommRow& c : r.comm) {
    busy += c.busy_s;
    exposed += c.exposed_s;
    payload[{c.dim, c.kind}] += c.bytes;
    if (std::string(c.dim) == "dp") {
      wire += c.wire_bytes;
      dp_busy += c.busy_s;
      dp_exposed += c.exposed_s;
    }
  }
  s.exposed_comm_fraction = busy > 0 ? exposed / busy : 0;
  s.exposed_dp = dp_busy > 0 ? dp_exposed / dp_busy : NAN;
  const double per = r.steps > 0 ? 1.0 / (double(r.steps) * r.ranks) : 0;
  s.dp_wire_bytes = wire * per;
  s.dp_wire_bytes_analytic = 0;
  // Exact: every rank moves the plan's payload per (dim, kind) in every timed step, and
  // nothing else.
  s.bytes_match = true;
  for (const AnalyticBytes& a : r.analytic) {
    if (a.dim == "dp") s.dp_wire_bytes_analytic += a.wire;
    auto it = payload.find({a.dim, a.kind});
    const uint64_t got = it == payload.end() ? 0 : it->second;
    if (got != expected_bytes(a, r.steps, r.ranks)) s.bytes_match = false;
    if (it != payload.end()) payload.erase(it);
  }
  for (const auto& [key, bytes] : payload)
    if (bytes > 0) s.bytes_match = false;
  s.check = check;
  return s;
}

void print_step_report(const core::Log& out, const StepRecord& r, const StepSummary& s) {
  out.out("  step time median {:.3f} ms (min {:.3f}, p99 {:.3f}; slowest rank per step) over {} steps after {} warm-up\n",
          s.step_time_median * 1e3, s.step_time_min * 1e3, s.step_time_p99 * 1e3, r.steps, r.warmup);
  // The time split (metrics.hpp): each rank's mean step = compute + exposed per dim + bubble + other.
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
  if (!r.comm.empty()) {
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
  if (!r.pipeline.empty()) {
    out.out("  pipeline per rank: {:>4} {:>10} {:>14} {:>8} {:>8} {:>10} {:>12}\n", "rank", "peak held",
            "peak act. MiB", "bubble", "theory", "recv wait", "recv xfer ms");
    for (const PipelineRow& p : r.pipeline)
      out.out("  {:>23} {:>10} {:>14.2f} {:>7.1f}% {:>7.1f}% {:>8.3f}ms {:>12.3f}\n", p.rank, p.peak_held,
              double(p.peak_activation_bytes) / (1024.0 * 1024.0), 100 * p.bubble, 100 * p.bubble_theory,
              p.recv_wait_s * 1e3, p.recv_transfer_s * 1e3);
  }
  out.out("  tokens/s {:.1f}, {:.2f} GFLOP/s, MFU {:.1f}% of the measured GEMM peaks ({:.2f} GFLOP/s over {} ranks); datasheet MFU {}\n",
          s.tokens_per_s, s.model_flops_per_s / 1e9, 100 * s.mfu_measured_peak, s.peak_measured_flops / 1e9,
          r.ranks, std::isnan(s.mfu_datasheet) ? std::string("n/a") : fmt::format("{:.1f}%", 100 * s.mfu_datasheet));
  out.out("  loss {:.4f} -> {:.4f}\n", s.loss_first, s.loss_last);
}

void write_step_jsonl(const std::string& path, const std::string& run_id, const std::string& tag,
                      const StepRecord& r, const StepSummary& s, int threads) {
  std::ofstream js(path, std::ios::app);
  for (size_t i = 0; i < r.step_time.size(); ++i) {
    const auto& row = r.step_time[i];
    nlohmann::ordered_json ph;
    for (size_t k = 0; k < kPhaseNames.size(); ++k) {
      double mx = 0;
      for (const auto& p : r.phases[i]) mx = std::max(mx, p[k]);
      ph[kPhaseNames[k]] = mx;
    }
    js << nlohmann::ordered_json{{"run_id", run_id}, {"binary", "step_bench"}, {"tag", tag}, {"step", i},
                                 {"step_time", *std::max_element(row.begin(), row.end())}, {"phases_max", ph},
                                 {"forward", ph["forward"]}, {"backward", ph["backward"]},
                                 {"optimizer", ph["optimizer"]}, {"loss", r.loss[i]}}
              .dump()
       << "\n";
  }
  js << nlohmann::ordered_json{{"run_id", run_id}, {"binary", "step_bench"}, {"tag", tag}, {"summary", true},
                               {"model", r.model}, {"plan", r.plan}, {"ranks", r.ranks}, {"threads", threads},
                               {"step_time_median", s.step_time_median}, {"tokens_per_s", s.tokens_per_s},
                               {"flops_per_step", s.flops_per_step}, {"model_flops_per_s", s.model_flops_per_s},
                               {"peak_measured_flops", s.peak_measured_flops}, {"mfu_measured_peak", s.mfu_measured_peak},
                               {"exposed_comm_fraction", s.exposed_comm_fraction}, {"straggler_rank", s.straggler_rank},
                               {"dp_wire_bytes", s.dp_wire_bytes}, {"dp_wire_bytes_analytic", s.dp_wire_bytes_analytic},
                               {"bytes_match", s.bytes_match}, {"check", s.check}}
            .dump()
     << "\n";
  js.flush();
  if (!js) throw core::RuntimeFault("cannot write " + path + ": " + std::strerror(errno));
}

}  // namespace meshbench::parallel
