// The GEMM peak MFU is normalised by (step/peak.hpp; issue 44, item 8): its statistics are the
// repeats' (median is the median, not the best; reps is the count), MFU's basis is the higher of
// the step's largest GEMM and the square reference, and on the CPU both are measured with at
// least 3 repeats each.
#include <gtest/gtest.h>

#include <vector>

#include "step/peak.hpp"

using namespace meshbench::parallel;

TEST(Peak, RateStatsAreTheRepeatsMedianBestAndCount) {
  const GemmShape s{"lm_head", 64, 512, 32, 1};
  const GemmRate odd = rate_stats(s, {3e9, 1e9, 10e9, 2e9, 4e9});
  EXPECT_DOUBLE_EQ(odd.best, 10e9);
  EXPECT_DOUBLE_EQ(odd.median, 3e9);
  EXPECT_EQ(odd.reps, 5);
  const GemmRate even = rate_stats(s, {3e9, 1e9, 10e9, 2e9});
  EXPECT_DOUBLE_EQ(even.median, 2.5e9);
  EXPECT_EQ(even.reps, 4);
  EXPECT_EQ(even.shape.name, "lm_head");
  const GemmRate none = rate_stats(s, {});
  EXPECT_EQ(none.reps, 0);
  EXPECT_EQ(none.best, 0.0);
}

TEST(Peak, MfuBasisIsTheHigherOfTheTwoAndSaysWhich) {
  const GemmRate largest = rate_stats({"lm_head", 1024, 50304, 512, 1}, {300e12, 280e12, 290e12});
  const GemmRate square = rate_stats(square_shape(true), {650e12, 600e12, 640e12});
  const Peak pk = choose_basis(largest, square);
  EXPECT_EQ(pk.basis, "square");
  EXPECT_DOUBLE_EQ(pk.best, 650e12);
  EXPECT_DOUBLE_EQ(pk.median, 640e12);
  EXPECT_EQ(pk.shape.M, kSquareGpu);
  EXPECT_DOUBLE_EQ(pk.largest.best, 300e12);  // both kept
  const Peak other = choose_basis(square, largest);  // the roles by argument, whatever the names
  EXPECT_EQ(other.basis, "largest_gemm");
  EXPECT_DOUBLE_EQ(other.best, 650e12);
}

TEST(Peak, CpuMeasuresBothWithRepeats) {
  GptConfig c;
  c.layers = 1;
  c.hidden = 32;
  c.heads = 2;
  c.kv_heads = 2;
  c.ffn = 64;
  c.seq = 8;
  c.max_seq = 8;
  c.vocab = 64;
  c.micro_batch = 1;
  EXPECT_EQ(square_shape(false).M, kSquareCpu);
  const GemmRate small = measure_sgemm(largest_gemm(c), 0.0);
  EXPECT_GE(small.reps, 3);
  EXPECT_GT(small.median, 0.0);
  EXPECT_LE(small.median, small.best);
  const GemmRate sq = measure_sgemm(GemmShape{"square", 128, 128, 128, 1}, 0.0);
  EXPECT_GE(sq.reps, 3);
  EXPECT_LE(sq.median, sq.best);
}
