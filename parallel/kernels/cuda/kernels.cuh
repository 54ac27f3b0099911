// The CUDA backend's kernels (float32 in, float32 out), each the device twin of a loop in
// layers.cpp: one block per row for the row reductions (layernorm, softmax, cross-entropy),
// one thread per element for the rest. Included by backend_cuda.cu only.
// Not here: GEMMs (cuBLAS, through the plans of operands.hpp), fused or flash attention.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace meshbench::parallel::cuda {
namespace {

inline unsigned blocks_for(size_t n, unsigned threads = 256) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}
// Threads per block for a row of n elements: a multiple of 32, at most 1024 (block_sum).
inline int row_threads(int n) { return n >= 1024 ? 1024 : (n >= 256 ? 256 : 128); }

__device__ float block_sum(float v) {
  __shared__ float s[32];
  __shared__ float out;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
  __syncthreads();  // a previous call's readers are done with s and out
  if (lane == 0) s[w] = v;
  __syncthreads();
  float r = threadIdx.x < nw ? s[threadIdx.x] : 0.f;
  if (w == 0)
    for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffff, r, o);
  if (threadIdx.x == 0) out = r;
  __syncthreads();
  return out;
}

__device__ float block_max(float v) {
  __shared__ float s[32];
  __shared__ float out;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
  __syncthreads();
  if (lane == 0) s[w] = v;
  __syncthreads();
  float r = threadIdx.x < nw ? s[threadIdx.x] : -INFINITY;
  if (w == 0)
    for (int o = 16; o > 0; o >>= 1) r = fmaxf(r, __shfl_xor_sync(0xffffffff, r, o));
  if (threadIdx.x == 0) out = r;
  __syncthreads();
  return out;
}

// out (n) = bf16(in), round to nearest even.
__global__ void k_to_bf16(__nv_bfloat16* out, const float* in, size_t n) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}
__global__ void k_scale(float* x, float a, size_t n) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= a;
}
__global__ void k_add(float* dst, const float* src, size_t n) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] += src[i];
}
// A deferred loss (issue 44, item 10): acc += the mean of the N row losses, summed in double
// as the host's mean_loss, rounded to float as the loss the op would have returned. One
// block of 256 threads.
__global__ void k_loss_add(double* acc, const float* losses, int N) {
  __shared__ double part[256];
  double s = 0;
  for (int i = threadIdx.x; i < N; i += blockDim.x) s += double(losses[i]);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) acc[0] += double(float(part[0] / N));
}
__global__ void k_embedding_fwd(float* out, const int32_t* tok, const float* wte, const float* wpe,
                                int N, int T, int C) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const int n = int(i / C), c = int(i % C);
  out[i] = (tok[n] >= 0 ? wte[size_t(tok[n]) * C + c] : 0.f) + (wpe ? wpe[size_t(n % T) * C + c] : 0.f);
}
__global__ void k_embedding_bwd(float* dwte, float* dwpe, const float* dout, const int32_t* tok,
                                int N, int T, int C) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const int n = int(i / C), c = int(i % C);
  if (tok[n] >= 0) atomicAdd(&dwte[size_t(tok[n]) * C + c], dout[i]);
  if (dwpe) atomicAdd(&dwpe[size_t(n % T) * C + c], dout[i]);
}
// One block per row n of inp (N, C).
__global__ void k_layernorm_fwd(float* out, float* mean, float* rstd, const float* inp,
                                const float* w, const float* b, int C) {
  const size_t n = blockIdx.x;
  const float* x = inp + n * C;
  float s = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
  const float m = block_sum(s) / C;
  float v = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) v += (x[c] - m) * (x[c] - m);
  const float r = rsqrtf(block_sum(v) / C + 1e-5f);
  for (int c = threadIdx.x; c < C; c += blockDim.x) out[n * C + c] = (x[c] - m) * r * w[c] + b[c];
  if (threadIdx.x == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}
// dinp += (one block per row); dw and db are column sums over the rows, reduced by
// k_layernorm_wb_partial and k_col_reduce (issue 30, defect 7: no longer N x C atomics onto C
// addresses).
__global__ void k_layernorm_bwd(float* dinp, const float* dout, const float* inp, const float* w,
                                const float* mean, const float* rstd, int C) {
  const size_t n = blockIdx.x;
  const float* x = inp + n * C;
  const float* d = dout + n * C;
  const float m = mean[n], r = rstd[n];
  float a = 0, bsum = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float norm = (x[c] - m) * r, dn = w[c] * d[c];
    a += dn;
    bsum += dn * norm;
  }
  const float dnorm_mean = block_sum(a) / C, dnorm_norm_mean = block_sum(bsum) / C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float norm = (x[c] - m) * r, dn = w[c] * d[c];
    dinp[n * C + c] += (dn - dnorm_mean - norm * dnorm_norm_mean) * r;
  }
}
// Column sums over tiles of rows (issue 30, defect 7): block (32, 8), grid (ceil(C/32),
// tiles); block (x, t) sums rows [t rows, (t+1) rows) of columns [32 x, 32 x + 32), the 8 rows
// of threads striding the tile and meeting in shared memory, into partial (tiles, C).
// k_col_reduce then adds the tiles into dst in tile order: the same sum on every run.
__global__ void k_col_partial(float* partial, const float* a, int N, int C, int rows) {
  __shared__ float sh[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x, lo = blockIdx.y * rows, hi = min(N, lo + rows);
  float s = 0;
  if (c < C)
    for (int n = lo + threadIdx.y; n < hi; n += 8) s += a[size_t(n) * C + c];
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0;
    for (int y = 0; y < 8; ++y) t += sh[y][threadIdx.x];
    partial[size_t(blockIdx.y) * C + c] = t;
  }
}
// The layernorm's weight and bias gradients over a tile of rows: sums of norm x dout and of
// dout, norm = (inp - mean) x rstd; as k_col_partial.
__global__ void k_layernorm_wb_partial(float* pw, float* pb, const float* dout, const float* inp,
                                       const float* mean, const float* rstd, int N, int C, int rows) {
  __shared__ float sw[8][33], sb[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x, lo = blockIdx.y * rows, hi = min(N, lo + rows);
  float w = 0, b = 0;
  if (c < C)
    for (int n = lo + threadIdx.y; n < hi; n += 8) {
      const size_t i = size_t(n) * C + c;
      const float d = dout[i];
      w += (inp[i] - mean[n]) * rstd[n] * d;
      b += d;
    }
  sw[threadIdx.y][threadIdx.x] = w;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0, tb = 0;
    for (int y = 0; y < 8; ++y) {
      tw += sw[y][threadIdx.x];
      tb += sb[y][threadIdx.x];
    }
    pw[size_t(blockIdx.y) * C + c] = tw;
    pb[size_t(blockIdx.y) * C + c] = tb;
  }
}
// dst (C) += the tiles' partial sums, in tile order.
__global__ void k_col_reduce(float* dst, const float* partial, int tiles, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0;
  for (int t = 0; t < tiles; ++t) s += partial[size_t(t) * C + c];
  dst[c] += s;
}
// out (N, OC) = bias, or += bias.
__global__ void k_bias_rows(float* out, const float* bias, int N, int OC, bool accumulate) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * OC) return;
  const float b = bias ? bias[i % OC] : 0.f;
  out[i] = accumulate ? out[i] + b : b;
}
__device__ float gelu_tanh(float x, float* dlocal) {
  const float k = 0.7978845608028654f, cube = 0.044715f * x * x * x, th = tanhf(k * (x + cube));
  if (dlocal)
    *dlocal = 0.5f * (1 + th) + x * 0.5f * (1 - th * th) * k * (1 + 3 * 0.044715f * x * x);
  return 0.5f * x * (1 + th);
}
__global__ void k_gelu_fwd(float* out, const float* inp, size_t n) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = gelu_tanh(inp[i], nullptr);
}
// dinp may alias dout: each element is read, then written, by one thread.
__global__ void k_gelu_bwd(float* dinp, const float* inp, const float* dout, size_t n) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float d;
  gelu_tanh(inp[i], &d);
  dinp[i] = d * dout[i];
}
// att: B*NH*T rows of length T, row r is query position r % T: causal softmax in place.
__global__ void k_causal_softmax(float* att, int T) {
  const size_t row = blockIdx.x;
  const int t = int(row % T);
  float* p = att + row * T;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) mx = fmaxf(mx, p[j]);
  mx = block_max(mx);
  float s = 0;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s += expf(p[j] - mx);
  const float inv = 1.f / block_sum(s);
  for (int j = threadIdx.x; j < T; j += blockDim.x) p[j] = j <= t ? expf(p[j] - mx) * inv : 0.f;
}
// ds (rows of T) = p * (ds - sum_j p ds) on the causal part, 0 above it.
__global__ void k_softmax_bwd(float* ds, const float* p, int T) {
  const size_t row = blockIdx.x;
  const int t = int(row % T);
  const float* pr = p + row * T;
  float* d = ds + row * T;
  float s = 0;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s += pr[j] * d[j];
  const float dot = block_sum(s);
  for (int j = threadIdx.x; j < T; j += blockDim.x) d[j] = j <= t ? pr[j] * (d[j] - dot) : 0.f;
}
// One block per row: probs (may alias logits) and losses[n] = -log softmax(x)[target].
__global__ void k_ce_fwd(float* probs, float* losses, const float* logits, const int32_t* tgt, int V) {
  const size_t n = blockIdx.x;
  const float* x = logits + n * V;
  float* p = probs + n * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_max(mx);
  float s = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(x[j] - mx);
  const float sum = block_sum(s), xt = x[tgt[n]];
  __syncthreads();  // every thread has read x[target] before any thread overwrites it
  for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = expf(x[j] - mx) / sum;
  if (threadIdx.x == 0) losses[n] = logf(sum) - (xt - mx);
}
__global__ void k_ce_bwd(float* dlogits, const float* probs, const int32_t* tgt, float scale, int N,
                         int V) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * V) return;
  const int n = int(i / V), j = int(i % V);
  dlogits[i] = probs[i] * scale - (j == tgt[n] ? scale : 0.f);  // tgt < 0: no one-hot here
}
// Vocabulary-parallel cross-entropy (layers.hpp), one block per row.
__global__ void k_ce_rowmax(float* rowmax, const float* logits, int V, int valid) {
  const size_t n = blockIdx.x;
  const float* x = logits + n * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_max(mx);
  if (threadIdx.x == 0) rowmax[n] = mx;
}
__global__ void k_ce_partial(float* probs, float* sumexp, float* tlogit, const float* logits,
                             const float* rowmax, const int32_t* tgt, int V, int valid) {
  const size_t n = blockIdx.x;
  const float* x = logits + n * V;
  float* p = probs + n * V;
  const float mx = rowmax[n], xt = tgt[n] >= 0 ? x[tgt[n]] : 0.f;
  __syncthreads();  // every thread has read x[target] before any thread overwrites it
  float s = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float e = j < valid ? expf(x[j] - mx) : 0.f;
    p[j] = e;
    s += e;
  }
  const float sum = block_sum(s);
  if (threadIdx.x == 0) {
    sumexp[n] = sum;
    tlogit[n] = xt;
  }
}
__global__ void k_ce_finish(float* probs, float* losses, const float* sumexp, const float* tlogit,
                            const float* rowmax, int V) {
  const size_t n = blockIdx.x;
  const float inv = 1.f / sumexp[n];
  for (int j = threadIdx.x; j < V; j += blockDim.x) probs[n * V + j] *= inv;
  if (threadIdx.x == 0) losses[n] = logf(sumexp[n]) - (tlogit[n] - rowmax[n]);
}
// Context-parallel attention between chunks (layers.hpp) in GEMM form (operands.hpp
// chunk_forward_gemms / chunk_backward_gemms; issue 30, defect 14): the row kernels between the
// cuBLAS batches. One block per row (b, h, query row i) of the B NH Tq x Tk scores; row i sees
// the keys j < min(Tk, q0 + i - k0 + 1).
// Forward: S (scaled scores) -> exp(S - m) on the visible keys (0 elsewhere), the row's max m
// and sum l kept for the merge.
__global__ void k_chunk_softmax(float* S, float* m, float* l, int Tq, int Tk, int q0, int k0) {
  const size_t row = blockIdx.x;
  const int i = int(row % Tq), vis = min(Tk, q0 + i - k0 + 1);
  float* p = S + row * Tk;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < vis; j += blockDim.x) mx = fmaxf(mx, p[j]);
  mx = block_max(mx);
  float s = 0;
  for (int j = threadIdx.x; j < vis; j += blockDim.x) s += expf(p[j] - mx);
  s = block_sum(s);
  for (int j = threadIdx.x; j < Tk; j += blockDim.x) p[j] = j < vis ? expf(p[j] - mx) : 0.f;
  if (threadIdx.x == 0) {
    m[row] = mx;
    l[row] = s;
  }
}
// Forward: the pair's output Opair / l (rows of NH hs per query row) folded into o with the
// weights of the old and the pair's log-sum-exp, one thread per (b, h, i, d); `first`: the
// row's first pair writes it. The log-sum-exp itself is updated after (k_chunk_lse), so every
// d of a row reads the old one.
__global__ void k_chunk_merge(float* o, int ldo, const float* lse, const float* op, const float* m, const float* l,
                              int B, int Tq, int Tk, int NH, int hs, int q0, int k0, bool first) {
  const size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (idx >= size_t(B) * NH * Tq * hs) return;
  const int d = int(idx % hs);
  const size_t row = idx / hs;  // (b, h, i)
  const int i = int(row % Tq), bh = int(row / Tq), b = bh / NH, h = bh % NH;
  const int vis = min(Tk, q0 + i - k0 + 1);
  float* out = o + (size_t(b) * Tq + i) * ldo + size_t(h) * hs + d;
  const float acc = op[(size_t(b) * Tq + i) * size_t(NH) * hs + size_t(h) * hs + d];
  if (first) {
    *out = vis > 0 ? acc / l[row] : 0.f;
    return;
  }
  if (vis <= 0) return;
  const float c = m[row] + logf(l[row]), old = lse[row], mx = fmaxf(old, c),
              wo = old == -INFINITY ? 0.f : expf(old - mx), wc = expf(c - mx);
  *out = (*out * wo + acc / l[row] * wc) / (wo + wc);
}
// Forward, after k_chunk_merge: each row's log-sum-exp over the keys seen so far.
__global__ void k_chunk_lse(float* lse, const float* m, const float* l, int rows, int Tq, int Tk, int q0, int k0,
                            bool first) {
  const size_t row = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (row >= size_t(rows)) return;
  const int i = int(row % Tq), vis = min(Tk, q0 + i - k0 + 1);
  const float c = vis > 0 ? m[row] + logf(l[row]) : -INFINITY;
  if (first) {
    lse[row] = c;
    return;
  }
  if (vis <= 0) return;
  const float old = lse[row], mx = fmaxf(old, c), wo = old == -INFINITY ? 0.f : expf(old - mx), wc = expf(c - mx);
  lse[row] = mx + logf(wo + wc);
}
// Backward: S (scaled scores) -> P = exp(S - lse) on the visible keys, 0 elsewhere.
__global__ void k_chunk_probs(float* S, const float* lse, int Tq, int Tk, int q0, int k0) {
  const size_t row = blockIdx.x;
  const int i = int(row % Tq), vis = min(Tk, q0 + i - k0 + 1);
  float* p = S + row * Tk;
  const float l = lse[row];
  for (int j = threadIdx.x; j < Tk; j += blockDim.x) p[j] = j < vis ? expf(p[j] - l) : 0.f;
}
// Backward: dS = scale P (dP - D) with D the row's sum of dO o (attention_rowdot).
__global__ void k_chunk_dscore(float* ds, const float* P, const float* D, int Tk, float scale) {
  const size_t row = blockIdx.x;
  const float Di = D[row];
  for (int j = threadIdx.x; j < Tk; j += blockDim.x) ds[row * Tk + j] = scale * P[row * Tk + j] * (ds[row * Tk + j] - Di);
}
__global__ void k_attn_rowdot(float* D, const float* dout, int lddo, const float* o, int ldo, int B, int T, int NH,
                              int hs) {
  const size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (idx >= size_t(B) * NH * T) return;
  const int i = int(idx % T), bh = int(idx / T), b = bh / NH, h = bh % NH;
  const float* a = dout + (size_t(b) * T + i) * lddo + size_t(h) * hs;
  const float* c = o + (size_t(b) * T + i) * ldo + size_t(h) * hs;
  float acc = 0.f;
  for (int d = 0; d < hs; ++d) acc += a[d] * c[d];
  D[idx] = acc;
}
__global__ void k_add_2d(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols) {
  const size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (idx >= size_t(rows) * cols) return;
  const int64_t r = int64_t(idx / cols), c = int64_t(idx % cols);
  dst[r * ld_dst + c] += src[r * ld_src + c];
}
// out (N, C) += x + bias.
__global__ void k_bias_residual_add(float* out, const float* x, const float* bias, int N, int C) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < size_t(N) * C) out[i] += x[i] + bias[i % C];
}
// AdamW as layers.cpp (the scalars are computed in double on the host, then rounded).
// `bad` counts the gradient elements that are not finite (the divergence check).
__global__ void k_adamw(float* p, const float* g, float* m, float* v, size_t n, float b1, float b2,
                        float omb1, float omb2, float eps, float decay, float step, float bc2_sqrt,
                        unsigned long long* bad) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i], mi = b1 * m[i] + omb1 * gi, vi = b2 * v[i] + omb2 * gi * gi;
  if (!isfinite(gi)) atomicAdd(bad, 1ull);
  m[i] = mi;
  v[i] = vi;
  p[i] = p[i] * decay - step * mi / (sqrtf(vi) / bc2_sqrt + eps);
}

}  // namespace
}  // namespace meshbench::parallel::cuda
