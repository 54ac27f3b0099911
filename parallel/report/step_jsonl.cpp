#include "report/step_jsonl.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace meshbench::parallel {

void write_step_jsonl(const std::string& path, const std::string& run_id, const StepRecord& r) {
  const StepSummary& s = r.summary;
  const std::string& tag = r.tag;
  const int threads = r.threads;
  std::ofstream js(path, std::ios::app);
  for (size_t i = 0; i < r.step_time.size(); ++i) {
    const auto& row = r.step_time[i];
    nlohmann::ordered_json ph;
    for (size_t k = 0; k < kPhaseNames.size(); ++k) {
      double mx = 0;
      for (const auto& p : r.phases[i]) mx = std::max(mx, p[k]);
      ph[kPhaseNames[k]] = mx;
    }
    js << nlohmann::ordered_json{{"run_id", run_id}, {"binary", "step_bench"}, {"tag", tag},
                                 {"status", r.status}, {"oversubscribed", r.oversubscribed}, {"step", i},
                                 {"step_time", *std::max_element(row.begin(), row.end())}, {"phases_max", ph},
                                 {"forward", ph["forward"]}, {"backward", ph["backward"]},
                                 {"optimizer", ph["optimizer"]}, {"loss", r.loss[i]}}
              .dump()
       << "\n";
  }
  js << nlohmann::ordered_json{{"run_id", run_id}, {"binary", "step_bench"}, {"tag", tag}, {"summary", true},
                               {"status", r.status}, {"oversubscribed", r.oversubscribed},
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
