// The model on the CUDA backend (kernels/cuda/cuda_backend.hpp): one whole step against the CPU
// float32 reference (model/step_parity.hpp), for the GPU tests (CudaParity) and
// scripts/gpu-check.sh; timed steps on a GPU are step_bench --device cuda's. Plain C++: built with or without CUDA (make_backend
// refuses without it).
#pragma once

#include <vector>

#include "kernels/cuda/cuda_backend.hpp"
#include "model/model.hpp"

namespace meshbench::parallel::cuda {

// step_parity (model/step_parity.hpp) of the CUDA backend on device 0.
// flash: the CUDA model runs --attention flash (flash_kernels.cuh).
std::vector<ParityRow> step_parity(const GptConfig& cfg, Precision p, unsigned seed, bool flash = false);

}  // namespace meshbench::parallel::cuda
