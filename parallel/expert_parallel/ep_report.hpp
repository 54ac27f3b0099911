// Expert parallel's report rows (issue 13): per rank, the rows its experts received and the
// expert, dispatch, combine and counts-exchange seconds per step; then, per column, the worst
// rank over the mean (the imbalance the routing caused). Plain rows: metrics/gather.hpp
// gathers them, report/step_console.cpp prints them, report/step_h5.cpp stores ep_* attributes.
// Not here: the exchanges themselves (moe.cpp), their analytic bytes (expert_parallel/plan.hpp).
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <vector>

#include "expert_parallel/moe.hpp"

namespace meshbench::parallel {

inline constexpr std::array<const char*, 5> kEpColumns = {"rows_received", "expert_s", "dispatch_s", "combine_s",
                                                         "counts_s"};

// One rank's columns (kEpColumns), per timed step.
struct EpRankRow {
  std::array<double, 5> v{};
};
EpRankRow ep_rank_row(const EpTotals& mine, int steps);

struct EpImbalance {
  std::vector<EpRankRow> ranks;             // empty: no expert parallelism
  std::array<double, 5> worst_over_mean{};  // per column; 1 where the mean is 0
};
EpImbalance ep_imbalance(std::vector<EpRankRow> ranks);

// The ep_* step attributes: ep_<column>_per_rank (lists) and ep_<column>_worst_over_mean.
nlohmann::ordered_json ep_attributes(const EpImbalance& e);

}  // namespace meshbench::parallel
