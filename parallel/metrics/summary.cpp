#include "metrics/summary.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/stats.hpp"

namespace meshbench::parallel {

uint64_t expected_bytes(const AnalyticBytes& a, int steps, int ranks) {
  if (a.total > 0) return a.total;  // data-dependent (expert parallel): exact over the run
  const uint64_t per_step = a.all_ranks > 0 ? a.all_ranks : a.payload * static_cast<uint64_t>(ranks);
  return per_step * static_cast<uint64_t>(steps);
}


StepSummary summarize(const StepRecord& r, double datasheet) {
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
  s.check = r.check;
  return s;
}

}  // namespace meshbench::parallel
