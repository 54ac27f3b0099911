#include "core/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace meshbench::core {

double percentile(std::span<const double> values, double p) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v(values.begin(), values.end());
  std::sort(v.begin(), v.end());
  double pos = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  auto lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, v.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

double median(std::span<const double> values) { return percentile(values, 50.0); }

double mean(std::span<const double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double min_of(std::span<const double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  return *std::min_element(values.begin(), values.end());
}

const char* name(RankStat s) {
  switch (s) {
    case RankStat::kMax: return "max";
    case RankStat::kAvg: return "avg";
    case RankStat::kMin: return "min";
    case RankStat::kRank0: return "rank0";
  }
  return "?";
}

SampleSummary summarize(std::span<const double> samples, int iters, int ranks, RankStat stat) {
  SampleSummary s;
  if (iters <= 0 || ranks <= 0) return s;
  // by_stat[k][i]: statistic kAllRankStats[k] of iteration i over ranks.
  std::vector<std::vector<double>> by_stat(4, std::vector<double>(static_cast<size_t>(iters)));
  std::vector<int> times_slowest(static_cast<size_t>(ranks), 0);
  for (int i = 0; i < iters; ++i) {
    const double* row = samples.data() + static_cast<size_t>(i) * static_cast<size_t>(ranks);
    int r_max = static_cast<int>(std::max_element(row, row + ranks) - row);
    auto at = static_cast<size_t>(i);
    by_stat[0][at] = row[r_max];
    by_stat[1][at] = std::accumulate(row, row + ranks, 0.0) / ranks;
    by_stat[2][at] = *std::min_element(row, row + ranks);
    by_stat[3][at] = row[0];
    ++times_slowest[static_cast<size_t>(r_max)];
  }
  for (size_t k = 0; k < 4; ++k) s.median_by_stat[k] = median(by_stat[k]);
  const std::vector<double>& chosen = by_stat[static_cast<size_t>(stat)];
  s.t_median = median(chosen);
  s.t_min = min_of(chosen);
  s.t_mean = mean(chosen);
  s.t_p99 = percentile(chosen, 99.0);
  s.slowest_rank = static_cast<int>(std::max_element(times_slowest.begin(), times_slowest.end()) -
                                    times_slowest.begin());
  return s;
}

}  // namespace meshbench::core
