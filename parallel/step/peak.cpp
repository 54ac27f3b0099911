#include "step/peak.hpp"

#include <algorithm>
#include <vector>

#include "compute/blas.hpp"
#include "core/stats.hpp"
#include "core/timer.hpp"

namespace meshbench::parallel {

GemmRate rate_stats(const GemmShape& shape, const std::vector<double>& rates) {
  GemmRate r;
  r.shape = shape;
  r.reps = static_cast<int>(rates.size());
  if (rates.empty()) return r;
  r.best = *std::max_element(rates.begin(), rates.end());
  r.median = meshbench::core::median(rates);
  return r;
}

Peak choose_basis(const GemmRate& largest, const GemmRate& square) {
  Peak pk;
  pk.largest = largest;
  pk.square = square;
  const bool sq = square.best > largest.best;
  const GemmRate& b = sq ? square : largest;
  pk.basis = sq ? "square" : "largest_gemm";
  pk.shape = b.shape;
  pk.best = b.best;
  pk.median = b.median;
  pk.reps = b.reps;
  return pk;
}

GemmRate measure_sgemm(const GemmShape& s, double min_seconds) {
  std::vector<float> A(static_cast<size_t>(s.M) * s.K, 0.01f), B(static_cast<size_t>(s.N) * s.K, 0.02f),
      C(static_cast<size_t>(s.M) * s.N, 0.f);
  auto call = [&] {
    meshbench::compute::gemm<float>(meshbench::compute::Trans::kNo, meshbench::compute::Trans::kYes, s.M, s.N, s.K, 1.f,
                                    A.data(), s.K, B.data(), s.K, 0.f, C.data(), s.N);
  };
  call();
  std::vector<double> rates;
  const double flops = 2.0 * s.M * s.N * s.K, t_start = meshbench::core::now_seconds();
  while (rates.size() < 3 || meshbench::core::now_seconds() - t_start < min_seconds) {
    const double t0 = meshbench::core::now_seconds();
    call();
    rates.push_back(flops / (meshbench::core::now_seconds() - t0));
    if (rates.size() >= 200) break;
  }
  return rate_stats(s, rates);
}

GemmShape square_shape(bool gpu) {
  const int n = gpu ? kSquareGpu : kSquareCpu;
  return GemmShape{"square", n, n, n, 1};
}

Peak measure_peak(const GptConfig& c, bool gpu, Precision prec, int device) {
  const GemmShape largest = largest_gemm(c), square = square_shape(gpu);
  if (!gpu) return choose_basis(measure_sgemm(largest, 0.5), measure_sgemm(square, 0.05));
  auto on_gpu = [&](const GemmShape& s) {
    const cuda::GemmTiming t = cuda::measure_gemm_peak(s.M, s.N, s.K, prec, device);
    return GemmRate{s, t.best, t.median, t.reps};
  };
  return choose_basis(on_gpu(largest), on_gpu(square));
}

}  // namespace meshbench::parallel
