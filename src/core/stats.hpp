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

// Timing samples of one point: samples[i * ranks + r] is iteration i on rank r (seconds).
// The headline statistics are taken over the per-iteration maximum across ranks (the
// slowest rank decides when a collective is done); slowest_rank is the rank that was
// slowest in the most iterations (lowest rank on ties).
struct SampleSummary {
  double t_median = 0, t_min = 0, t_mean = 0, t_p99 = 0;
  int slowest_rank = -1;
};
SampleSummary summarize(std::span<const double> samples, int iters, int ranks);

}  // namespace meshbench::core
