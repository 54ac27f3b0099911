#include "step/peak.hpp"

#include <algorithm>
#include <vector>

#include "compute/blas.hpp"
#include "core/stats.hpp"
#include "core/timer.hpp"

namespace meshbench::parallel {

// SGEMM FLOP/s on the model's largest forward GEMM (A (M,K) @ B (N,K)^T, as the engine calls
// it), repeated for at least `min_seconds` and 3 calls after one warm-up call.
Peak measure_sgemm_peak(const GptConfig& c, double min_seconds) {
  Peak pk;
  pk.shape = largest_gemm(c);
  const auto& s = pk.shape;
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
  pk.best = *std::max_element(rates.begin(), rates.end());
  pk.median = meshbench::core::median(rates);
  pk.reps = static_cast<int>(rates.size());
  return pk;
}

// The GEMM peak MFU is normalised by: SGEMM on the CPU, cuBLAS (fp32 or bf16 inputs) on a GPU.
Peak measure_peak(const GptConfig& c, bool gpu, Precision prec, int device) {
  if (!gpu) return measure_sgemm_peak(c, 0.5);
  Peak pk;
  pk.shape = largest_gemm(c);
  pk.best = pk.median = cuda::measure_gemm_peak(pk.shape.M, pk.shape.N, pk.shape.K, prec, device);
  pk.reps = 3;
  return pk;
}

}  // namespace meshbench::parallel
