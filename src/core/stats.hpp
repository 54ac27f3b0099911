// Order statistics over timing samples. Percentiles interpolate linearly between the two
// nearest order statistics (numpy's default), so p50 of {1,2,3,4} is 2.5.
#pragma once

#include <span>
#include <vector>

namespace meshbench::core {

double percentile(std::span<const double> values, double p);  // p in [0, 100]; NaN if empty
double median(std::span<const double> values);
double mean(std::span<const double> values);
double min_of(std::span<const double> values);

// How one iteration's per-rank times become one time (nccl-tests' -a: rank 0, average,
// minimum or maximum; OSU reports the average). kMax is the default: a collective is done
// when its slowest rank is.
enum class RankStat { kMax, kAvg, kMin, kRank0 };
inline constexpr RankStat kAllRankStats[] = {RankStat::kMax, RankStat::kAvg, RankStat::kMin, RankStat::kRank0};
const char* name(RankStat s);

// Timing samples of one point: samples[i * ranks + r] is iteration i on rank r (seconds).
// The headline statistics are taken over the per-iteration `stat` across ranks (default the
// maximum); slowest_rank is the rank that was slowest in the most iterations (lowest rank on
// ties); median_by_stat[s] is the median over iterations of statistic s (kAllRankStats order).
struct SampleSummary {
  double t_median = 0, t_min = 0, t_mean = 0, t_p99 = 0;
  int slowest_rank = -1;
  double median_by_stat[4] = {0, 0, 0, 0};
};
SampleSummary summarize(std::span<const double> samples, int iters, int ranks, RankStat stat = RankStat::kMax);

}  // namespace meshbench::core
