// The GEMM input precision of a compute backend, and bf16 rounding on the host. kBf16 means
// what cublasGemmEx with CUDA_R_16BF inputs and CUBLAS_COMPUTE_32F does: both GEMM inputs
// rounded to bfloat16 (round to nearest, ties to even, as __float2bfloat16), products
// accumulated in fp32, the output fp32. Everything else (master weights, gradients, Adam
// moments, the elementwise layers) stays fp32 in both precisions.
// Not here: the backends (backend.hpp, backend_emulated.hpp, cuda/).
#pragma once

#include <cstdint>
#include <cstring>

namespace meshbench::parallel {

enum class Precision { kFp32, kBf16 };

inline const char* precision_name(Precision p) { return p == Precision::kFp32 ? "fp32" : "bf16"; }

// x rounded to the nearest bfloat16 (8 exponent, 7 mantissa bits), ties to even, returned as
// the float it represents. NaN stays NaN; values past the largest bf16 round to infinity.
inline float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u) {  // inf or NaN: truncate, keeping NaN a NaN
    u = (u & 0x007fffffu) ? ((u | 0x00400000u) & 0xffff0000u) : (u & 0xffff0000u);
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
  }
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

}  // namespace meshbench::parallel
