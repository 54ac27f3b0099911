// The GEMM peak a step's MFU is normalised by, measured on this machine (issue 44, item 8):
// two GEMMs, each timed repeatedly with its best and median rate and repeat count kept:
// - the step's largest GEMM (largest_gemm: the shape the step itself runs at most);
// - a square reference, n^3 in the step's GEMM dtype: 8192 on a GPU (cuBLAS, fp32 or bf16
//   inputs), 512 on the CPU (SGEMM: 8192^3 would take seconds per call on a few cores, and every
//   run measures it twice: 512^3 keeps that near 0.1 s)
// MFU uses the higher of the two best rates, and `basis` says which (the largest GEMM of a
// small model, e.g. the LM head at K = 512, runs far below the tensor cores' rate, and MFU
// against it alone read about twice the datasheet MFU). step_bench measures before and after
// the timed steps and uses the higher.
#pragma once

#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/flops.hpp"
#include "common/config.hpp"

namespace meshbench::parallel {

struct GemmRate {
  GemmShape shape;
  double best = 0, median = 0;  // FLOP/s over the timed repeats
  int reps = 0;                 // timed repeats (batches of back-to-back calls on a GPU)
};

struct Peak {
  GemmShape shape;              // the basis's shape, best, median and repeats (what MFU uses)
  double best = 0, median = 0;  // FLOP/s
  int reps = 0;
  GemmRate largest, square;
  std::string basis;  // "largest_gemm" or "square"
};

constexpr int kSquareGpu = 8192, kSquareCpu = 512;

// best = max, median = the median, reps = the count, of per-repeat rates (FLOP/s).
GemmRate rate_stats(const GemmShape& shape, const std::vector<double>& rates);
// The peak from its two measurements: the higher best rate is the basis.
Peak choose_basis(const GemmRate& largest, const GemmRate& square);
// SGEMM FLOP/s on shape (A (M,K) @ B (N,K)^T, as the engine calls it), for at least
// `min_seconds` and 3 timed calls after one warm-up call.
GemmRate measure_sgemm(const GemmShape& shape, double min_seconds);
// The square reference's shape on this device.
GemmShape square_shape(bool gpu);
// The peak for the device in use (CPU: SGEMM, 0.5 s on the largest GEMM, 0.2 s on the square).
Peak measure_peak(const GptConfig& c, bool gpu, Precision prec, int device);

}  // namespace meshbench::parallel
