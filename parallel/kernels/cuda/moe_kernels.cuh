// The CUDA twins of the MoE operations of moe_layers.cpp (float32): the router's softmax and
// top-k (one thread per row: E is small), the dispatch plan (four launches over many blocks,
// moe_plan_blocks.hpp: each expert's assignments keep their token order without atomics), permute
// and unpermute (one thread per element; one block per assignment for the gate gradient's
// dot product). Included by backend_cuda.cu after kernels.cuh (block_sum).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/moe_plan_blocks.hpp"

namespace meshbench::parallel::cuda {
namespace {

__global__ void k_moe_topk_fwd(int32_t* idx, float* gates, float* probs, const float* logits, int N,
                               int E, int k, bool assigned) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* z = logits + size_t(n) * E;
  float* p = probs + size_t(n) * E;
  float mx = z[0];
  for (int e = 1; e < E; ++e) mx = fmaxf(mx, z[e]);
  float sum = 0.f;
  for (int e = 0; e < E; ++e) {
    p[e] = expf(z[e] - mx);
    sum += p[e];
  }
  for (int e = 0; e < E; ++e) p[e] /= sum;
  int32_t* id = idx + size_t(n) * k;
  if (!assigned)
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int i = 0; i < j; ++i) taken = taken || id[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      id[j] = best;
    }
  float chosen = 0.f;
  for (int j = 0; j < k; ++j) chosen += p[id[j]];
  for (int j = 0; j < k; ++j) gates[size_t(n) * k + j] = p[id[j]] / chosen;
}

__global__ void k_moe_topk_bwd(float* dlogits, const float* dgates, const float* dprobs,
                               const float* probs, const float* gates, const int32_t* idx, int N,
                               int E, int k) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* p = probs + size_t(n) * E;
  float* dz = dlogits + size_t(n) * E;
  float pa = 0.f;
  if (dprobs != nullptr)
    for (int e = 0; e < E; ++e) pa += p[e] * dprobs[e];
  for (int e = 0; e < E; ++e) dz[e] = dprobs != nullptr ? p[e] * (dprobs[e] - pa) : 0.f;
  const float* g = gates + size_t(n) * k;
  const float* dg = dgates + size_t(n) * k;
  float gdg = 0.f;
  for (int j = 0; j < k; ++j) gdg += g[j] * dg[j];
  for (int j = 0; j < k; ++j) dz[idx[size_t(n) * k + j]] += g[j] * (dg[j] - gdg);
}

// The dispatch plan over many blocks (moe_plan_blocks.hpp: the four launches and their steps,
// shared with the host emulation); any expert count fits (issue 44, item 12).
namespace mpb = moe_plan_blocks;
__global__ void k_moe_plan_ranks(int32_t* slot, int32_t* hist, const int32_t* idx, int64_t A, int E) {
  __shared__ int32_t ids[mpb::kChunk];
  const int64_t c = blockIdx.x, a0 = c * mpb::kChunk;
  const int n = int(A - a0 < mpb::kChunk ? A - a0 : mpb::kChunk), i = int(threadIdx.x);
  if (i < n) ids[i] = idx[a0 + i];
  __syncthreads();
  if (i < n) mpb::rank_in_chunk(slot, hist, ids, n, i, a0 + i, c, E);
}
__global__ void k_moe_plan_experts(int32_t* base, int32_t* routed, float* prob_sum, const int32_t* hist,
                                   const float* probs, int64_t chunks, int N, int E) {
  const int e = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (e < E) mpb::scan_expert(base, routed, prob_sum, hist, probs, chunks, N, E, e);
}
// One block of kScanThreads: each thread's run total, an inclusive scan of them in shared
// memory, then each run's offsets.
__global__ void k_moe_plan_offsets(int32_t* counts, int E, int capacity) {
  __shared__ int32_t part[mpb::kScanThreads];
  const int t = int(threadIdx.x);
  part[t] = mpb::run_total(counts, E, capacity, t);
  __syncthreads();
  for (int d = 1; d < mpb::kScanThreads; d <<= 1) {
    const int32_t v = t >= d ? part[t - d] : 0;
    __syncthreads();
    part[t] += v;
    __syncthreads();
  }
  mpb::run_offsets(counts + E, counts, E, capacity, t, t > 0 ? part[t - 1] : 0, part[mpb::kScanThreads - 1]);
}
__global__ void k_moe_plan_slots(int32_t* slot, const int32_t* idx, const int32_t* base, const int32_t* offsets,
                                 int64_t A, int E) {
  const int64_t a = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (a < A) mpb::place(slot, idx, base, offsets, a, a / mpb::kChunk, E);
}

// One thread per (assignment, channel).
__global__ void k_moe_permute_fwd(float* xp, const float* x, const int32_t* slot, int N, int C, int k) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * k * C) return;
  const size_t a = i / C, c = i % C;
  const int32_t r = slot[a];
  if (r >= 0) xp[size_t(r) * C + c] = x[(a / k) * C + c];
}
// One thread per (token, channel).
__global__ void k_moe_permute_bwd(float* dx, const float* dxp, const int32_t* slot, int N, int C, int k) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const size_t n = i / C, c = i % C;
  float s = 0.f;
  for (int j = 0; j < k; ++j) {
    const int32_t r = slot[n * k + j];
    if (r >= 0) s += dxp[size_t(r) * C + c];
  }
  dx[i] = s;
}
__global__ void k_moe_unpermute_fwd(float* out, const float* yp, const float* gates,
                                    const int32_t* slot, int N, int C, int k) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const size_t n = i / C, c = i % C;
  float s = 0.f;
  for (int j = 0; j < k; ++j) {
    const int32_t r = slot[n * k + j];
    if (r >= 0) s += gates[n * k + j] * yp[size_t(r) * C + c];
  }
  out[i] += s;
}
// One block per assignment: dyp row = gate * dout row, dgate = dout row . yp row.
__global__ void k_moe_unpermute_bwd(float* dyp, float* dgates, const float* dout, const float* yp,
                                    const float* gates, const int32_t* slot, int C, int k) {
  const size_t a = blockIdx.x;
  const int32_t r = slot[a];
  if (r < 0) {  // uniform over the block: no thread reaches block_sum
    if (threadIdx.x == 0) dgates[a] = 0.f;
    return;
  }
  const float* d = dout + (a / k) * C;
  const float* y = yp + size_t(r) * C;
  float* dy = dyp + size_t(r) * C;
  const float g = gates[a];
  float s = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    s += d[c] * y[c];
    dy[c] = g * d[c];
  }
  s = block_sum(s);
  if (threadIdx.x == 0) dgates[a] = s;
}

}  // namespace
}  // namespace meshbench::parallel::cuda
