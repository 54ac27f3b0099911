// The step engine's CUDA path behind a plain C++ interface (CUDA types stay in the .cu
// files): the factory of the CUDA compute backend (backend_cuda.cu: cuBLAS + kernels, fp32 or
// bf16 GEMM inputs with fp32 accumulation), device facts for the MFU, the parity checks
// against the CPU float32 reference, and a plain timed loop of Gpt<float> over the backend.
// Built only when the toolkit exists (cuda_engine_nocuda.cpp otherwise); without a usable
// GPU available() says why, so drivers refuse and tests skip.
// Not here: the model wiring (model.hpp, written once for every backend), the parity rules
// and tolerances (parity.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "vocab/config.hpp"
#include "kernels/layers.hpp"
#include "model/model.hpp"
#include "kernels/parity.hpp"
#include "vocab/precision.hpp"

namespace meshbench::parallel::cuda {

using Precision = parallel::Precision;
using ParityRow = parallel::ParityRow;

// True when a GPU is usable; otherwise why not in `why` (compute::probe_gpus() tells "no
// GPU" from "a GPU CUDA cannot use", e.g. a driver older than the runtime).
bool available(std::string* why);
std::string device_name(int device = 0);
double device_memory_gib(int device = 0);  // NaN without a usable GPU

// The CUDA compute backend on `device` (cudaSetDevice is called once, in the constructor;
// use the backend from the thread and device it was made on). Throws UsageError when built
// without CUDA.
std::unique_ptr<Backend<float>> make_backend(Precision p, int device = 0);

// Dense datasheet peak (FLOP/s) for `p` of the GPU named `device_name` with the memory of
// device 0 (exact match, datasheet.hpp); NaN when no entry matches (never a default).
double datasheet_peak(const std::string& device_name, Precision p);

// layer_parity / step_parity (parity.hpp) of the CUDA backend on device 0.
std::vector<ParityRow> layer_parity(Precision p, unsigned seed);
std::vector<ParityRow> step_parity(const GptConfig& cfg, Precision p, unsigned seed);

// cuBLAS GEMM FLOP/s on C (M,N) = A (M,K) B (N,K)^T with operands already in the GEMM's
// input type: only the GEMM is timed (no conversion), best of at least 3 calls over 0.3 s.
double measure_gemm_peak(int M, int N, int K, Precision p, int device = 0);

// `steps` training steps of Gpt<float> over the CUDA backend after `warmup`, each one
// zero_grad, forward, backward and AdamW step s+1 (1-based over warm-up and timed steps), on
// synthetic data (step s's batch of `data` from `seed`); per-step seconds and losses.
struct GpuRunOptions {
  AdamWConfig adam{};
  DataKind data = DataKind::kRandom;
  double time_limit_s = 0;  // > 0: stop before a step that would start after this many s
  int device = 0;
};
struct GpuStepTimes {
  std::vector<double> step, forward, backward, optimizer, loss;
  bool timed_out = false;
};
GpuStepTimes run_steps(const GptConfig& cfg, Precision p, int warmup, int steps, unsigned seed,
                       const GpuRunOptions& opt = {});

}  // namespace meshbench::parallel::cuda
