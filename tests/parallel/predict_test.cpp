// The step model's wait at a collective (parallel/predict/predict.hpp, arrival_wait): a fixed
// lead of one rank combined with a random drift between the two.
#include <cmath>
#include <numbers>

#include <gtest/gtest.h>

#include "predict/predict.hpp"

namespace meshbench::parallel {
namespace {

// Half the mean of |offset + delta| for a Gaussian delta of mean absolute value `drift`, by
// quadrature (not the closed form under test).
double wait_by_quadrature(double offset, double drift) {
  const double sigma = drift * std::sqrt(std::numbers::pi / 2);
  const int n = 200000;
  const double lo = -12 * sigma, h = 24 * sigma / n;
  double sum = 0;
  for (int i = 0; i <= n; ++i) {
    const double x = lo + i * h, w = (i == 0 || i == n) ? 0.5 : 1.0;
    sum += w * std::abs(offset + x) * std::exp(-0.5 * x * x / (sigma * sigma));
  }
  return 0.5 * sum * h / (sigma * std::sqrt(2 * std::numbers::pi));
}

TEST(Predict, ArrivalWaitIsHalfTheFoldedNormalsMean) {
  EXPECT_DOUBLE_EQ(arrival_wait(0.0, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(arrival_wait(0.3, 0.0), 0.15);   // a lead alone: the later rank's lead, halved
  EXPECT_DOUBLE_EQ(arrival_wait(-0.3, 0.0), 0.15);
  EXPECT_NEAR(arrival_wait(0.0, 0.2), 0.1, 1e-15);  // a drift alone: its mean gap, halved
  for (const auto& [offset, drift] : {std::pair{0.0, 1.0}, {0.5, 1.0}, {1.0, 1.0}, {2.0, 1.0}, {0.01, 0.003}}) {
    const double want = wait_by_quadrature(offset, drift);
    EXPECT_NEAR(arrival_wait(offset, drift), want, 1e-9 * std::max(1.0, want)) << offset << " " << drift;
    // never less than either part alone, never more than both
    EXPECT_GE(arrival_wait(offset, drift), std::max(offset, drift) / 2 - 1e-15);
    EXPECT_LE(arrival_wait(offset, drift), (offset + drift) / 2 + 1e-15);
  }
  // a lead of a few drifts: the drift adds next to nothing (it changes how late, not who waits)
  EXPECT_NEAR(arrival_wait(5.0, 1.0), 2.5, 1e-3);
}

}  // namespace
}  // namespace meshbench::parallel
