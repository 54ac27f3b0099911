// Fast exp and tanh for the CPU kernels' elementwise loops (layers.cpp, attention_layers.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace meshbench::parallel::fastmath {

// exp and tanh for the elementwise loops. float: a branch-free Cephes-style expf (range
// reduction by ln2, degree-6 polynomial, 2^n by exponent bits; about 2 ulp, inputs clamped
// to [-87.3, 88.7]) that GCC vectorises inside `omp simd` loops, where std::exp would be a
// scalar libm call per element. double (the gradient checks): the libm functions.
inline float fast_expf(float x) {
  x = std::min(std::max(x, -87.3f), 88.7f);
  // round(x / ln2) by the 1.5 * 2^23 trick: std::floor blocks GCC 12's vectoriser here
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

template <typename S>
inline S exp_(S x) {
  if constexpr (std::is_same_v<S, float>) {
    return fast_expf(x);
  } else {
    return std::exp(x);
  }
}

template <typename S>
inline S tanh_(S x) {
  if constexpr (std::is_same_v<S, float>) {
    return 1.0f - 2.0f / (fast_expf(2.0f * x) + 1.0f);  // saturates to +-1 without overflow
  } else {
    return std::tanh(x);
  }
}


}  // namespace meshbench::parallel::fastmath
