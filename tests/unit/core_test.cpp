// Tests of src/core: size parsing and formatting (units.hpp), decimal GB/s, and the order
// statistics of stats.hpp. Expected percentiles are numpy.percentile(..., method='linear')
// values, computed by hand from the definition and cross-checked with numpy once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/stats.hpp"
#include "core/warmup.hpp"
#include "core/units.hpp"

namespace meshbench::core {
namespace {

constexpr std::uint64_t kKi = 1024, kMi = kKi * 1024, kGi = kMi * 1024;

// ---- parse_size ----------------------------------------------------------------------------

TEST(ParseSize, PlainBytes) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("8"), 8u);
  EXPECT_EQ(parse_size("1000"), 1000u);  // no decimal units: a number is bytes
  EXPECT_EQ(parse_size("8B"), 8u);
  EXPECT_EQ(parse_size("18446744073709551615"), std::numeric_limits<std::uint64_t>::max());
}

TEST(ParseSize, BinarySuffixes) {
  EXPECT_EQ(parse_size("64K"), 64 * kKi);
  EXPECT_EQ(parse_size("128M"), 128 * kMi);
  EXPECT_EQ(parse_size("1G"), kGi);
  EXPECT_EQ(parse_size("2T"), 2 * kGi * kKi);
  EXPECT_EQ(parse_size("3M"), 3 * kMi);
}

TEST(ParseSize, SuffixSpellings) {
  EXPECT_EQ(parse_size("64KiB"), 64 * kKi);
  EXPECT_EQ(parse_size("64KB"), 64 * kKi);
  EXPECT_EQ(parse_size("64k"), 64 * kKi);
  EXPECT_EQ(parse_size("64kib"), 64 * kKi);
  EXPECT_EQ(parse_size("1gb"), kGi);
  EXPECT_EQ(parse_size("16MiB"), 16 * kMi);
}

TEST(ParseSize, RejectsWhatIsNotASize) {
  for (const char* bad : {"", "K", "abc", "-1", "-8K", "+8", "1.5M", "8 K", " 8", "8 ", "64KX", "64KIBB",
                          "8BB", "8E", "8P", "0x10", "M8", "8MK", "64Ki"}) {
    EXPECT_FALSE(parse_size(bad).has_value()) << "'" << bad << "' parsed as " << parse_size(bad).value_or(0);
  }
}

TEST(ParseSize, RejectsOverflow) {
  EXPECT_FALSE(parse_size("18446744073709551616").has_value());  // 2^64
  EXPECT_FALSE(parse_size("17179869184G").has_value());          // 2^34 GiB = 2^64
  EXPECT_EQ(parse_size("17179869183G"), (17179869183ull << 30));  // largest that fits
  EXPECT_FALSE(parse_size("16777216T").has_value());             // 2^24 TiB = 2^64
}

// ---- format_size ---------------------------------------------------------------------------

TEST(FormatSize, ExactBinaryMultiplesGetASuffix) {
  EXPECT_EQ(format_size(0), "0");
  EXPECT_EQ(format_size(8), "8");
  EXPECT_EQ(format_size(1024), "1K");
  EXPECT_EQ(format_size(64 * kKi), "64K");
  EXPECT_EQ(format_size(128 * kMi), "128M");
  EXPECT_EQ(format_size(kGi), "1G");
  EXPECT_EQ(format_size(kGi * kKi), "1T");
  EXPECT_EQ(format_size(kGi * kMi), "1024T");  // T is the largest unit
}

TEST(FormatSize, OtherSizesStayInBytes) {
  EXPECT_EQ(format_size(1000), "1000");
  EXPECT_EQ(format_size(1536), "1536");       // 1.5K is not exact
  EXPECT_EQ(format_size(1025 * kKi), "1025K");  // exact in K, not in M
  EXPECT_EQ(format_size(3 * kMi + 1), "3145729");
}

TEST(FormatSize, RoundTripsThroughParse) {
  for (std::uint64_t b : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{7}, 3 * kKi, 5 * kMi + 4096,
                          7 * kGi, 1536 * kGi, std::uint64_t{999999}})
    EXPECT_EQ(parse_size(format_size(b)), b) << format_size(b);
}

// ---- gb_per_s ------------------------------------------------------------------------------

TEST(GbPerS, DecimalGigabytesPerSecond) {
  EXPECT_DOUBLE_EQ(gb_per_s(1e9, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(gb_per_s(static_cast<double>(kGi), 1.0), 1.073741824);  // 1 GiB/s is 1.0737 GB/s
  EXPECT_DOUBLE_EQ(gb_per_s(8.0, 1e-6), 0.008);
  EXPECT_EQ(gb_per_s(8.0, 0.0), 0.0);
  EXPECT_EQ(gb_per_s(8.0, -1.0), 0.0);
  EXPECT_EQ(gb_per_s(0.0, 1.0), 0.0);
}

// ---- percentile / median -------------------------------------------------------------------

std::vector<double> iota_from_1(int n) {
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 1.0);
  return v;
}

TEST(Stats, MedianOfKnownArrays) {
  EXPECT_DOUBLE_EQ(median(std::vector<double>{1, 2, 3, 4}), 2.5);
  EXPECT_DOUBLE_EQ(median(std::vector<double>{3, 1, 2}), 2.0);         // unsorted input
  EXPECT_DOUBLE_EQ(median(std::vector<double>{5}), 5.0);
  EXPECT_DOUBLE_EQ(median(std::vector<double>{4, 4, 1, 9, 100}), 4.0);
  EXPECT_DOUBLE_EQ(median(std::vector<double>{1e-6, 3e-6}), 2e-6);
}

TEST(Stats, PercentileIsNumpyLinear) {
  auto v = iota_from_1(100);                            // 1..100
  EXPECT_NEAR(percentile(v, 99), 99.01, 1e-12);         // np.percentile(range(1,101), 99)
  EXPECT_NEAR(percentile(v, 50), 50.5, 1e-12);
  EXPECT_NEAR(percentile(v, 25), 25.75, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 100.0);
  // A straggler in 10 samples: p99 interpolates 91% of the way from 9 to 1000.
  std::vector<double> s{1000, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_NEAR(percentile(s, 99), 910.81, 1e-9);
  EXPECT_NEAR(percentile(s, 90), 108.1, 1e-9);
  // Two samples: p99 = a + 0.99 (b - a).
  EXPECT_NEAR(percentile(std::vector<double>{2, 4}, 99), 3.98, 1e-12);
}

TEST(Stats, PercentileClampsAndHandlesEmpty) {
  std::vector<double> v{1, 2, 3};
  EXPECT_DOUBLE_EQ(percentile(v, -5), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 150), 3.0);
  EXPECT_TRUE(std::isnan(percentile(std::vector<double>{}, 50)));
  EXPECT_TRUE(std::isnan(median(std::vector<double>{})));
  EXPECT_TRUE(std::isnan(mean(std::vector<double>{})));
  EXPECT_TRUE(std::isnan(min_of(std::vector<double>{})));
}

TEST(Stats, MeanAndMin) {
  EXPECT_DOUBLE_EQ(mean(std::vector<double>{1, 2, 3, 10}), 4.0);
  EXPECT_DOUBLE_EQ(min_of(std::vector<double>{5, -1, 3}), -1.0);
}

// ---- summarize: statistics of the slowest rank per iteration -------------------------------

TEST(Summarize, HeadlineIsOverPerIterationMaxAcrossRanks) {
  // [iters=4][ranks=3]; the per-iteration maxima are 5, 7, 3, 9 (ranks 2, 0, 1, 2).
  std::vector<double> s{1, 2, 5,
                        7, 1, 1,
                        1, 3, 2,
                        4, 4, 9};
  SampleSummary r = summarize(s, 4, 3);
  EXPECT_DOUBLE_EQ(r.t_median, 6.0);   // median of {3,5,7,9}
  EXPECT_DOUBLE_EQ(r.t_min, 3.0);      // not the global minimum 1
  EXPECT_DOUBLE_EQ(r.t_mean, 6.0);
  EXPECT_NEAR(r.t_p99, 7 + 0.97 * 2, 1e-12);  // pos 2.97 among {3,5,7,9}
  EXPECT_EQ(r.slowest_rank, 2);        // slowest in 2 of 4 iterations
}

TEST(Summarize, SlowestRankIsTheMostFrequentNotTheSlowestOnce) {
  // Rank 0 has the single worst sample; rank 1 is slowest in 3 of 4 iterations.
  std::vector<double> s{100, 1,
                        1, 2,
                        1, 2,
                        1, 2};
  SampleSummary r = summarize(s, 4, 2);
  EXPECT_EQ(r.slowest_rank, 1);
  EXPECT_DOUBLE_EQ(r.t_median, 2.0);
  EXPECT_DOUBLE_EQ(r.t_min, 2.0);
  EXPECT_DOUBLE_EQ(r.t_mean, 26.5);
}

TEST(Summarize, TiesGoToTheLowestRank) {
  std::vector<double> s{1, 5, 1, 1,
                        1, 1, 1, 5};  // rank 1 once, rank 3 once
  EXPECT_EQ(summarize(s, 2, 4).slowest_rank, 1);
  std::vector<double> equal(12, 2.0);  // every rank equal in every iteration: rank 0
  EXPECT_EQ(summarize(equal, 3, 4).slowest_rank, 0);
}

TEST(Summarize, OneRankOneIteration) {
  std::vector<double> s{4e-6};
  SampleSummary r = summarize(s, 1, 1);
  EXPECT_DOUBLE_EQ(r.t_median, 4e-6);
  EXPECT_DOUBLE_EQ(r.t_p99, 4e-6);
  EXPECT_EQ(r.slowest_rank, 0);
}

TEST(Summarize, EmptyShapeLeavesNoSlowestRank) {
  std::vector<double> s;
  EXPECT_EQ(summarize(s, 0, 4).slowest_rank, -1);
  EXPECT_EQ(summarize(s, 4, 0).slowest_rank, -1);
}


// ---- rank statistics: nccl-tests' -a and OSU's average ---------------------------------------

TEST(Summarize, EveryRankStatisticIsStoredAndTheChosenOneHeadlines) {
  // [iters=3][ranks=2]: per iteration max {2,4,6}, avg {1.5,3,4.5}, min {1,2,3}, rank 0 {2,2,3}.
  std::vector<double> s{2, 1,
                        2, 4,
                        3, 6};
  SampleSummary mx = summarize(s, 3, 2);
  EXPECT_DOUBLE_EQ(mx.median_by_stat[0], 4.0);
  EXPECT_DOUBLE_EQ(mx.median_by_stat[1], 3.0);
  EXPECT_DOUBLE_EQ(mx.median_by_stat[2], 2.0);
  EXPECT_DOUBLE_EQ(mx.median_by_stat[3], 2.0);
  EXPECT_DOUBLE_EQ(mx.t_median, 4.0);
  SampleSummary avg = summarize(s, 3, 2, RankStat::kAvg);
  EXPECT_DOUBLE_EQ(avg.t_median, 3.0);
  EXPECT_DOUBLE_EQ(avg.t_min, 1.5);
  EXPECT_DOUBLE_EQ(avg.t_mean, 3.0);
  EXPECT_DOUBLE_EQ(summarize(s, 3, 2, RankStat::kMin).t_median, 2.0);
  EXPECT_DOUBLE_EQ(summarize(s, 3, 2, RankStat::kRank0).t_mean, 7.0 / 3);
  EXPECT_EQ(avg.slowest_rank, 1);  // independent of the statistic
  EXPECT_STREQ(name(RankStat::kRank0), "rank0");
}

// ---- adaptive warm-up -------------------------------------------------------------------------

WarmupPolicy policy() {
  WarmupPolicy p;
  p.window = 10;
  p.tolerance = 0.05;
  p.floor_calls = 40;
  p.floor_seconds = 1e9;
  p.max_calls = 100;
  p.max_seconds = 1e9;
  return p;
}

// Feeds windows with the given medians (1 ms of wall time each) until the tracker stops.
WarmupTracker feed(const std::vector<double>& medians, WarmupPolicy p = policy()) {
  WarmupTracker t(p);
  for (double m : medians) {
    if (t.add_window(t.next_window(), m, 1e-3)) break;
  }
  return t;
}

TEST(Warmup, ConvergesOnceStableAfterTheFloor) {
  // Stable from the start, but not before 40 calls.
  WarmupTracker t = feed({5, 5, 5, 5, 5, 5});
  EXPECT_TRUE(t.done());
  EXPECT_TRUE(t.converged());
  EXPECT_EQ(t.calls(), 40);
}

TEST(Warmup, APlateauBeforeTheFloorIsNotTakenForStability) {
  // The MPICH/UCX shape: a slow plateau, then fast. Windows 1-2 agree, but inside the floor.
  WarmupTracker t = feed({15, 15, 4, 4, 4});
  EXPECT_TRUE(t.converged());
  EXPECT_EQ(t.calls(), 40);
  EXPECT_DOUBLE_EQ(t.last_median(), 4);
}

TEST(Warmup, GivesUpNotConvergedAtTheCallCap) {
  std::vector<double> drifting;
  for (int i = 0; i < 20; ++i) drifting.push_back(10.0 * (i % 2 ? 1.0 : 1.5));
  WarmupTracker t = feed(drifting);
  EXPECT_TRUE(t.done());
  EXPECT_FALSE(t.converged());
  EXPECT_EQ(t.calls(), 100);
}

TEST(Warmup, GivesUpAtTheTimeCapAndTheLastWindowIsCut) {
  WarmupPolicy p = policy();
  p.max_calls = 25;  // windows 10, 10, 5
  WarmupTracker t(p);
  EXPECT_EQ(t.next_window(), 10);
  t.add_window(10, 1, 0);
  t.add_window(10, 2, 0);
  EXPECT_EQ(t.next_window(), 5);
  EXPECT_TRUE(t.add_window(5, 3, 0));
  EXPECT_FALSE(t.converged());
  EXPECT_EQ(t.next_window(), 0);
  WarmupPolicy q = policy();
  q.max_seconds = 0.5;
  WarmupTracker u(q);
  EXPECT_TRUE(u.add_window(10, 1, 0.6));  // one window past the time cap
  EXPECT_FALSE(u.converged());
}

TEST(Warmup, TheTimeFloorReplacesTheCallFloorForSlowCalls) {
  WarmupPolicy p = policy();
  p.floor_seconds = 0.1;
  WarmupTracker t(p);
  t.add_window(10, 0.02, 0.2);
  EXPECT_TRUE(t.add_window(10, 0.0201, 0.2));
  EXPECT_TRUE(t.converged());
  EXPECT_EQ(t.calls(), 20);
}

}  // namespace
}  // namespace meshbench::core
