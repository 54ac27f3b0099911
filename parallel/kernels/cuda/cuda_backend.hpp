// The step engine's CUDA backend behind a plain C++ interface (CUDA types stay in the .cu
// files): the factory of the CUDA compute backend (backend_cuda.cu: cuBLAS + kernels, fp32 or
// bf16 GEMM inputs with fp32 accumulation), device facts for the MFU, the per-op parity
// against the CPU float32 reference and the cuBLAS GEMM peak. Built only when the toolkit
// exists (cuda_backend_nocuda.cpp otherwise); without a usable GPU available() says why, so
// drivers refuse and tests skip.
// Not here: the model over it (model/cuda_steps.hpp: the whole-step parity),
// the parity rules and tolerances (kernels/parity.hpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/layers.hpp"
#include "kernels/parity.hpp"
#include "common/config.hpp"
#include "common/precision.hpp"

namespace meshbench::parallel::cuda {

using Precision = parallel::Precision;
using ParityRow = parallel::ParityRow;

// True when a GPU is usable; otherwise why not in `why` (compute::probe_gpus() tells "no
// GPU" from "a GPU CUDA cannot use", e.g. a driver older than the runtime).
bool available(std::string* why);
std::string device_name(int device = 0);
double device_memory_gib(int device = 0);  // NaN without a usable GPU

// Opens cuBLAS the way the backend does at its first construction (dlopen, every function it
// calls resolved: cublas_api.cuh): "" when that worked, else why. Needs no GPU. The binaries do
// not link cuBLAS, so a process that never builds a CUDA backend never loads it.
std::string open_cublas();

// The CUDA compute backend on `device` (cudaSetDevice is called once, in the constructor;
// use the backend from the thread and device it was made on). Throws UsageError when built
// without CUDA.
std::unique_ptr<Backend<float>> make_backend(Precision p, int device = 0);

// Dense datasheet peak (FLOP/s) for `p` of the GPU named `device_name` with the memory of
// device 0 (exact match, datasheet.hpp); NaN when no entry matches (never a default).
double datasheet_peak(const std::string& device_name, Precision p);

// Runs `work` (calls on `be`, a CUDA backend) under stream capture of be's stream, where any
// host or device synchronisation, cudaMalloc or cudaFree fails: "" when none happened, else
// the error (issue 44, items 10 and 11: GPU cases in CudaParity). Nothing captured runs.
std::string host_sync_in(Backend<float>& be, const std::function<void()>& work);

// layer_parity (kernels/parity.hpp) of the CUDA backend on device 0.
std::vector<ParityRow> layer_parity(Precision p, unsigned seed);

// cuBLAS GEMM FLOP/s on C (M,N) = A (M,K) B (N,K)^T with operands already in the GEMM's
// input type: only the GEMMs are timed (no conversion), each timing a batch of back-to-back
// calls of about 2 ms between CUDA events (so launch latency does not count), at least 3
// batches over 0.3 s: the best and the median batch's rate, and the number of batches.
struct GemmTiming {
  double best = 0, median = 0;  // FLOP/s
  int reps = 0;
};
GemmTiming measure_gemm_peak(int M, int N, int K, Precision p, int device = 0);

}  // namespace meshbench::parallel::cuda
