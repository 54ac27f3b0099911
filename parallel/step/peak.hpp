// The GEMM peak a step's MFU is normalised by, measured on this machine: SGEMM (OpenBLAS) on
// the model's largest forward GEMM shape on the CPU, cuBLAS (fp32 or bf16 inputs) on a GPU.
// step_bench measures it before and after the timed steps and uses the higher.
#pragma once

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/flops.hpp"
#include "vocab/config.hpp"

namespace meshbench::parallel {

struct Peak {
  GemmShape shape;
  double best = 0, median = 0;  // FLOP/s
  int reps = 0;
};

// SGEMM FLOP/s on the largest forward GEMM, for at least `min_seconds` and 3 calls after a warm-up.
Peak measure_sgemm_peak(const GptConfig& c, double min_seconds);
// The peak for the device in use (CPU: measure_sgemm_peak over 0.5 s).
Peak measure_peak(const GptConfig& c, bool gpu, Precision prec, int device);

}  // namespace meshbench::parallel
