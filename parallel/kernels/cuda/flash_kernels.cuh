// Flash attention on the GPU (--attention flash; FlashAttention-2's algorithm without the
// T x T matrix): a block per (query tile, head) for the forward and dQ, per (key tile, kv head)
// for dK and dV, kRows threads each owning one row, the other side's rows staged kTile at a
// time in shared memory. The per-row arithmetic is flash_tile.hpp's, which the CPU emulation
// of this backend (backend_emulated.cpp) runs in the same order: the kernels' indexing and
// masking are tested there without a GPU. Deterministic: no atomics (each dK, dV row belongs
// to one thread, which loops over its kv group's query heads).
// Layouts: qkv (B, T, (NH + 2 KVH) hs) fused, out and dout (B, T, NH hs), lse and D (B, NH, T).
#pragma once

#include <cuda_runtime.h>

#include "kernels/flash_tile.hpp"

namespace meshbench::parallel::cuda {

struct FlashDims {
  int B, T, NH, KVH, hs;
  __host__ __device__ int qkv() const { return (NH + 2 * KVH) * hs; }
  __host__ __device__ int C() const { return NH * hs; }
};

// Copies rows [r0, r0 + n) of a strided (B, T, ld) array's column block at `col` (hs wide) into
// the shared tile dst (n x hs), the block's threads striding over the elements.
__device__ inline void flash_stage(float* dst, const float* src, int b, int T, int r0, int n, int ld, int col, int hs) {
  for (int e = threadIdx.x; e < n * hs; e += blockDim.x) {
    const int t = e / hs, d = e % hs;
    dst[e] = src[(size_t(b) * T + r0 + t) * ld + col + d];
  }
}

// A forward or dQ block: query tile blockIdx.x of head blockIdx.y (kv group g) of sample
// blockIdx.z; this thread's row i, held when i < T.
struct QueryBlock {
  int b, h, g, i0, r, i;
  bool mine;
};
__device__ inline QueryBlock query_block(const FlashDims& s) {
  QueryBlock q;
  q.b = blockIdx.z, q.h = blockIdx.y, q.g = q.h / (s.NH / s.KVH), q.i0 = blockIdx.x * flash::kRows;
  q.r = min(flash::kRows, s.T - q.i0), q.i = q.i0 + threadIdx.x, q.mine = int(threadIdx.x) < q.r;
  return q;
}

// The key tiles a query block sees (up to its last row), each staged in Ks, Vs (kTile x hs of
// shared memory) by the whole block, then row(j0, c) for its c keys from j0.
template <typename F>
__device__ void over_key_tiles(const float* qkv, const FlashDims& s, const QueryBlock& q, float* Ks, float* Vs, F&& row) {
  for (int j0 = 0; j0 < q.i0 + q.r; j0 += flash::kTile) {
    const int c = min(flash::kTile, s.T - j0);
    __syncthreads();
    flash_stage(Ks, qkv, q.b, s.T, j0, c, s.qkv(), (s.NH + q.g) * s.hs, s.hs);
    flash_stage(Vs, qkv, q.b, s.T, j0, c, s.qkv(), (s.NH + s.KVH + q.g) * s.hs, s.hs);
    __syncthreads();
    row(j0, c);
  }
}

// grid (ceil(T / kRows), NH, B), kRows threads, 2 kTile hs floats of shared memory.
__global__ void k_flash_fwd(float* out, float* lse, const float* qkv, FlashDims s, float scale) {
  using namespace flash;
  extern __shared__ float sh[];
  float* Ks = sh;
  float* Vs = sh + kTile * s.hs;
  const QueryBlock qb = query_block(s);
  float q[kMaxHead], acc[kMaxHead];
  float m = -INFINITY, l = 0.f;
  if (qb.mine)
    for (int d = 0; d < s.hs; ++d) q[d] = qkv[(size_t(qb.b) * s.T + qb.i) * s.qkv() + qb.h * s.hs + d], acc[d] = 0.f;
  over_key_tiles(qkv, s, qb, Ks, Vs, [&](int j0, int c) {
    if (qb.mine) forward_row(q, Ks, Vs, c, j0, qb.i, s.hs, scale, m, l, acc);
  });
  if (!qb.mine) return;
  float* o = out + (size_t(qb.b) * s.T + qb.i) * s.C() + qb.h * s.hs;
  for (int d = 0; d < s.hs; ++d) o[d] = acc[d] / l;
  lse[(size_t(qb.b) * s.NH + qb.h) * s.T + qb.i] = m + logf(l);
}

// D = rowsum(dO * O), a thread per (b, h, i).
__global__ void k_flash_rowdot(float* D, const float* dout, const float* out, FlashDims s) {
  const size_t n = size_t(s.B) * s.NH * s.T;
  for (size_t x = blockIdx.x * size_t(blockDim.x) + threadIdx.x; x < n; x += size_t(gridDim.x) * blockDim.x) {
    const int i = int(x % s.T), h = int(x / s.T % s.NH), b = int(x / (size_t(s.T) * s.NH));
    const size_t at = (size_t(b) * s.T + i) * s.C() + h * s.hs;
    D[x] = flash::dot(dout + at, out + at, s.hs);
  }
}

// grid (ceil(T / kRows), KVH, B), kRows threads, 2 kTile hs + 2 kTile floats of shared memory.
__global__ void k_flash_dkdv(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
                             FlashDims s, float scale) {
  using namespace flash;
  extern __shared__ float sh[];
  float* Qs = sh;
  float* dOs = Qs + kTile * s.hs;
  float* Ls = dOs + kTile * s.hs;
  float* Ds = Ls + kTile;
  const int b = blockIdx.z, g = blockIdx.y, j0 = blockIdx.x * kRows, group = s.NH / s.KVH;
  const int r = min(kRows, s.T - j0), j = j0 + threadIdx.x, QKV = s.qkv();
  const bool mine = int(threadIdx.x) < r;
  float k[kMaxHead], v[kMaxHead], dk[kMaxHead], dv[kMaxHead];
  if (mine)
    for (int d = 0; d < s.hs; ++d) {
      k[d] = qkv[(size_t(b) * s.T + j) * QKV + (s.NH + g) * s.hs + d];
      v[d] = qkv[(size_t(b) * s.T + j) * QKV + (s.NH + s.KVH + g) * s.hs + d];
      dk[d] = dv[d] = 0.f;
    }
  for (int h = g * group; h < (g + 1) * group; ++h)
    for (int i0 = j0 / kTile * kTile; i0 < s.T; i0 += kTile) {
      const int c = min(kTile, s.T - i0);
      __syncthreads();
      flash_stage(Qs, qkv, b, s.T, i0, c, QKV, h * s.hs, s.hs);
      flash_stage(dOs, dout, b, s.T, i0, c, s.C(), h * s.hs, s.hs);
      for (int t = threadIdx.x; t < c; t += blockDim.x) {
        Ls[t] = lse[(size_t(b) * s.NH + h) * s.T + i0 + t];
        Ds[t] = D[(size_t(b) * s.NH + h) * s.T + i0 + t];
      }
      __syncthreads();
      if (mine) dkdv_row(k, v, j, Qs, dOs, Ls, Ds, c, i0, s.hs, scale, dk, dv);
    }
  if (!mine) return;
  float* row = dqkv + (size_t(b) * s.T + j) * QKV;
  for (int d = 0; d < s.hs; ++d) {
    row[(s.NH + g) * s.hs + d] = dk[d];
    row[(s.NH + s.KVH + g) * s.hs + d] = dv[d];
  }
}

// grid (ceil(T / kRows), NH, B), kRows threads, 2 kTile hs floats of shared memory.
__global__ void k_flash_dq(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
                           FlashDims s, float scale) {
  using namespace flash;
  extern __shared__ float sh[];
  float* Ks = sh;
  float* Vs = sh + kTile * s.hs;
  const QueryBlock qb = query_block(s);
  float q[kMaxHead], dO[kMaxHead], dq[kMaxHead];
  float l = 0.f, Di = 0.f;
  if (qb.mine) {
    for (int d = 0; d < s.hs; ++d) {
      q[d] = qkv[(size_t(qb.b) * s.T + qb.i) * s.qkv() + qb.h * s.hs + d];
      dO[d] = dout[(size_t(qb.b) * s.T + qb.i) * s.C() + qb.h * s.hs + d];
      dq[d] = 0.f;
    }
    l = lse[(size_t(qb.b) * s.NH + qb.h) * s.T + qb.i];
    Di = D[(size_t(qb.b) * s.NH + qb.h) * s.T + qb.i];
  }
  over_key_tiles(qkv, s, qb, Ks, Vs, [&](int j0, int c) {
    if (qb.mine) dq_row(q, dO, l, Di, qb.i, Ks, Vs, c, j0, s.hs, scale, dq);
  });
  if (!qb.mine) return;
  float* row = dqkv + (size_t(qb.b) * s.T + qb.i) * s.qkv() + qb.h * s.hs;
  for (int d = 0; d < s.hs; ++d) row[d] = dq[d];
}

}  // namespace meshbench::parallel::cuda
