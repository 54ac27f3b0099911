// Central finite differences in float64 against an analytic gradient, for the engine's
// gradient checks. The verdict combines a per-tensor normalised error and a per-element
// relative error with a tiny absolute floor (for elements whose gradient is ~0).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace meshbench::parallel::test {

struct GradError {
  double norm_rel = 0;   // ||num - ana|| / ||num||
  double worst_rel = 0;  // max over elements of |num - ana| / max(|num|, |ana|, floor)
  int64_t checked = 0;
};

// Perturbs x[i] for i in [0, n) with step `stride` (1 = every element), evaluates `loss`,
// and compares (L(x+h) - L(x-h)) / 2h with analytic[i].
inline GradError fd_check(const std::function<double()>& loss, double* x, const double* analytic,
                          int64_t n, int64_t stride = 1, double h = 1e-5) {
  constexpr double kFloor = 1e-3;  // elements with |grad| << 1e-3 are judged absolutely
  double num2 = 0, diff2 = 0;
  GradError e;
  for (int64_t i = 0; i < n; i += stride) {
    const double keep = x[i];
    x[i] = keep + h;
    const double lp = loss();
    x[i] = keep - h;
    const double lm = loss();
    x[i] = keep;
    const double num = (lp - lm) / (2 * h);
    const double d = num - analytic[i];
    num2 += num * num;
    diff2 += d * d;
    e.worst_rel = std::max(e.worst_rel, std::abs(d) / std::max({std::abs(num), std::abs(analytic[i]), kFloor}));
    ++e.checked;
  }
  e.norm_rel = num2 > 0 ? std::sqrt(diff2 / num2) : std::sqrt(diff2);
  return e;
}

// Shared by the gradient-check tests: the tolerance, seeded normal inputs, a dot product
// (a scalar loss from an output and a fixed random weighting) and the verdict.
inline constexpr double kTol = 1e-6;

inline std::vector<double> randn(size_t n, unsigned seed, double scale = 1.0) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

inline void expect_ok(const GradError& e, const char* what) {
  EXPECT_GT(e.checked, 0) << what;
  EXPECT_LT(e.norm_rel, kTol) << what << " normalised error";
  EXPECT_LT(e.worst_rel, kTol) << what << " worst element";
}

}  // namespace meshbench::parallel::test
