// The step engine's CUDA path behind a plain C++ interface (CUDA types stay in the .cu file):
// cuBLAS GEMMs (fp32, or bf16 inputs with fp32 accumulation) and plain kernels for the other
// layers. Built only when the toolkit exists; without a GPU every entry point reports
// unavailable (CUDA error 35 here) so drivers and tests skip cleanly.
// Not here: the CPU reference (layers.hpp), which this path must match.
#pragma once

#include <string>
#include <vector>

#include "config.hpp"

namespace meshbench::parallel::cuda {

enum class Precision { kFp32, kBf16 };

// True when the engine was built with CUDA and a GPU answers; otherwise why not in `why`.
bool available(std::string* why);
std::string device_name();

// Dense datasheet peak (FLOP/s) of the current GPU for `p`, by device name; NaN when the
// name is not in the table (never a default).
double datasheet_peak(const std::string& device_name, Precision p);

// Per-layer parity against the CPU float32 layers on random data: one row per op with the
// normalised error ||gpu - cpu|| / ||cpu|| of every output.
struct ParityRow {
  std::string op;
  double rel_err, tolerance;
};
std::vector<ParityRow> layer_parity(Precision p, unsigned seed);

// A whole training step (forward, backward, AdamW) on the GPU from the same weights and
// tokens as the CPU model: normalised errors of loss, logits, grads and updated params.
std::vector<ParityRow> step_parity(const GptConfig& cfg, Precision p, unsigned seed);

// cuBLAS GEMM FLOP/s on C (M,N) = A (M,K) B (N,K)^T, best of at least 3 calls over 0.3 s.
double measure_gemm_peak(int M, int N, int K, Precision p);

// Times `steps` training steps on the GPU after `warmup`; per-step seconds.
struct GpuStepTimes {
  std::vector<double> step, forward, backward, optimizer, loss;
};
GpuStepTimes run_steps(const GptConfig& cfg, Precision p, int warmup, int steps, unsigned seed);

}  // namespace meshbench::parallel::cuda
