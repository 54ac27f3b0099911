// The CUDA backend's algorithm on the host, for checks that need no GPU: a Backend<float>
// whose matmul and attention run the device backends' GEMM plans (operands.hpp) with
// compute::gemm, in the same order and with the same full-square causal softmax as
// cuda/backend_cuda.cu, and whose GEMM inputs are rounded to bf16 (round to nearest even,
// fp32 accumulation) when the precision is kBf16. Every other op is the CPU backend's.
// - kFp32: the plans must reproduce the CPU reference to fp32 accuracy (a CPU test), so a
//   wrong offset, transpose or scalar in a plan fails here, not on the GPU.
// - kBf16: the errors it shows against the CPU reference are what bf16 GEMM inputs cost;
//   they set the bf16 tolerances of the CUDA parity tests (parity.hpp), and a CPU test pins
//   them (issue 17).
// Not here: speed (it copies and rounds every GEMM input), the CUDA kernels themselves.
#pragma once

#include "kernels/backend.hpp"
#include "common/precision.hpp"

namespace meshbench::parallel {

// One process-wide instance per precision; name() is "cpu-emulated fp32" / "... bf16".
Backend<float>& emulated_backend(Precision p);

}  // namespace meshbench::parallel
