// The per-row steps of the CUDA flash attention kernels (cuda/backend_cuda.cu k_flash_*), as
// host-and-device functions, so that the CPU emulation of the CUDA backend (backend_emulated.cpp)
// runs the kernels' own arithmetic in the kernels' own order: one block per (query tile, head)
// whose threads each own one query row (forward, dQ) or one key row (dK, dV), with the other
// side's rows staged tile by tile in shared memory. fp32 throughout, on both CUDA precisions
// (no tensor-core GEMM here: the bf16 backend's GEMM-input rounding does not apply).
// Scores are scale q.k over keys j <= i (causal); lse is the row's log-sum-exp of its scores.
// Not here: the CPU reference kernels (layers.hpp flash_attention_*, BLAS tiles).
#pragma once

#include "kernels/host_device.hpp"

#include <cmath>

namespace meshbench::parallel::flash {

constexpr int kRows = 64;      // rows one block owns (one thread each): query rows, or key rows for dK, dV
constexpr int kTile = 32;      // rows of the other side staged in shared memory at a time
constexpr int kMaxHead = 128;  // head size limit (each thread's accumulators)

MB_HD inline float dot(const float* a, const float* b, int n) {
  float s = 0.f;
  for (int d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// Forward, query row i: keys j0 .. j0 + c - 1 (Ks, Vs: c rows of hs) folded into the running max
// m, sum l and unnormalised output acc (online softmax).
MB_HD inline void forward_row(const float* q, const float* Ks, const float* Vs, int c, int j0, int i, int hs,
                              float scale, float& m, float& l, float* acc) {
  const int vis = c < i - j0 + 1 ? c : i - j0 + 1;
  if (vis <= 0) return;
  float s[kTile];
  float mn = m;
  for (int j = 0; j < vis; ++j) {
    s[j] = scale * dot(q, Ks + j * hs, hs);
    mn = s[j] > mn ? s[j] : mn;
  }
  const float corr = m == -INFINITY ? 0.f : expf(m - mn);
  float add = 0.f;
  for (int j = 0; j < vis; ++j) {
    s[j] = expf(s[j] - mn);
    add += s[j];
  }
  l = l * corr + add;
  m = mn;
  for (int d = 0; d < hs; ++d) {
    float a = acc[d] * corr;
    for (int j = 0; j < vis; ++j) a += s[j] * Vs[j * hs + d];
    acc[d] = a;
  }
}

// Backward, key row j (k, v): the queries i0 .. i0 + r - 1 (Qs, dOs: r rows of hs; Ls, Ds:
// their log-sum-exp and rowsum(dO * O)) add to dk and dv.
MB_HD inline void dkdv_row(const float* k, const float* v, int j, const float* Qs, const float* dOs, const float* Ls,
                           const float* Ds, int r, int i0, int hs, float scale, float* dk, float* dv) {
  for (int t = 0; t < r; ++t) {
    if (i0 + t < j) continue;
    const float* q = Qs + t * hs;
    const float* dO = dOs + t * hs;
    const float p = expf(scale * dot(q, k, hs) - Ls[t]);
    const float ds = p * (dot(dO, v, hs) - Ds[t]) * scale;
    for (int d = 0; d < hs; ++d) {
      dv[d] += p * dO[d];
      dk[d] += ds * q[d];
    }
  }
}

// Backward, query row i (q, dO, its lse and D): keys j0 .. j0 + c - 1 (Ks, Vs) add to dq.
MB_HD inline void dq_row(const float* q, const float* dO, float lse, float D, int i, const float* Ks, const float* Vs,
                         int c, int j0, int hs, float scale, float* dq) {
  const int vis = c < i - j0 + 1 ? c : i - j0 + 1;
  for (int j = 0; j < vis; ++j) {
    const float* k = Ks + j * hs;
    const float p = expf(scale * dot(q, k, hs) - lse);
    const float ds = p * (dot(dO, Vs + j * hs, hs) - D) * scale;
    for (int d = 0; d < hs; ++d) dq[d] += ds * k[d];
  }
}

}  // namespace meshbench::parallel::flash
