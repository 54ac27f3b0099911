#include "expert_parallel/ep_report.hpp"

#include <algorithm>
#include <fmt/core.h>

namespace meshbench::parallel {

EpRankRow ep_rank_row(const EpTotals& mine, int steps) {
  const double s = 1.0 / std::max(1, steps);
  return {{double(mine.rows_recv) * s, mine.expert_s * s, mine.dispatch_s * s, mine.combine_s * s, mine.counts_s * s}};
}

EpImbalance ep_imbalance(std::vector<EpRankRow> ranks) {
  EpImbalance e;
  e.ranks = std::move(ranks);
  if (e.ranks.empty()) return e;
  for (size_t k = 0; k < kEpColumns.size(); ++k) {
    double sum = 0, worst = e.ranks.front().v[k];
    for (const EpRankRow& r : e.ranks) {
      sum += r.v[k];
      worst = std::max(worst, r.v[k]);
    }
    const double mean = sum / double(e.ranks.size());
    e.worst_over_mean[k] = mean > 0 ? worst / mean : 1.0;
  }
  return e;
}

nlohmann::ordered_json ep_attributes(const EpImbalance& e) {
  nlohmann::ordered_json attrs = nlohmann::ordered_json::object();
  if (e.ranks.empty()) return attrs;
  for (size_t k = 0; k < kEpColumns.size(); ++k) {
    std::vector<double> col;
    for (const EpRankRow& r : e.ranks) col.push_back(r.v[k]);
    attrs[fmt::format("ep_{}_per_rank", kEpColumns[k])] = col;
    attrs[fmt::format("ep_{}_worst_over_mean", kEpColumns[k])] = e.worst_over_mean[k];
  }
  return attrs;
}

}  // namespace meshbench::parallel
