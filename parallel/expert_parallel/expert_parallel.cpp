#include "expert_parallel/expert_parallel.hpp"

#include <algorithm>
#include <fmt/core.h>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "vocab/trace.hpp"

namespace meshbench::parallel {

using core::UsageError;

void validate_expert_parallel(const Plan& p) {
  const int ep = p.degrees.ep;
  if (ep < 2) return;
  const GptConfig& m = p.model;
  if (m.experts == 0)
    throw UsageError(fmt::format("--mesh ep={}: expert parallel places experts on ranks; needs MoE blocks (--experts E)", ep));
  if (m.experts % ep != 0)
    throw UsageError(fmt::format("--mesh ep={}: --experts {} must be divisible by ep (each rank holds E/ep experts)", ep, m.experts));
  if (m.top_k > m.experts)
    throw UsageError(fmt::format("--top-k {}: must be <= --experts {}", m.top_k, m.experts));
}

std::vector<AnalyticBytes> ep_analytic(const GptConfig& c, int ep, const EpTotals& mine, int steps, int sb) {
  if (ep < 2) return {};
  const double row = static_cast<double>(c.hidden) * sb, per = 1.0 / std::max(1, steps);
  // forward dispatch + combine, and the backward the same rows again (own rows included)
  const uint64_t rows_total = 2 * static_cast<uint64_t>(mine.rows_sent + mine.rows_recv) * static_cast<uint64_t>(row);
  const double rows_wire = 2.0 * static_cast<double>(mine.remote_sent + mine.remote_recv) * row * per;
  const uint64_t counts_total = static_cast<uint64_t>(mine.count_calls) * static_cast<uint64_t>(c.experts) * sb;
  auto mean = [&](uint64_t total) { return static_cast<uint64_t>(static_cast<double>(total) * per + 0.5); };
  const std::string a2a(comm::name(comm::Collective::kAllToAll)), a2av(comm::name(comm::Collective::kAllToAllV));
  AnalyticBytes counts{"ep", a2a, mean(counts_total), wire_bytes(comm::Collective::kAllToAll, mean(counts_total), ep)};
  counts.total = counts_total;
  AnalyticBytes rows{"ep", a2av, mean(rows_total), rows_wire};
  rows.total = rows_total;
  return {counts, rows};
}

}  // namespace meshbench::parallel
