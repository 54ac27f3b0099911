// The model on the CUDA backend (kernels/cuda/cuda_backend.hpp): one whole step against the CPU
// float32 reference (model/step_parity.hpp) and a plain timed loop of Gpt<float>, for the
// GPU tests and scripts/gpu-check.sh. Plain C++: built with or without CUDA (make_backend
// refuses without it).
#pragma once

#include <vector>

#include "kernels/cuda/cuda_backend.hpp"
#include "model/model.hpp"

namespace meshbench::parallel::cuda {

// step_parity (model/step_parity.hpp) of the CUDA backend on device 0.
// flash: the CUDA model runs --attention flash (flash_kernels.cuh).
std::vector<ParityRow> step_parity(const GptConfig& cfg, Precision p, unsigned seed, bool flash = false);

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
