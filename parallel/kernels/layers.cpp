// CPU (OpenMP + OpenBLAS) forward/backward pairs declared in layers.hpp, after llm.c's
// train_gpt2.c. Instantiated for float (the engine) and double (gradient checks).
#include "kernels/layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "compute/blas.hpp"

namespace meshbench::parallel {

using compute::gemm;
using compute::Trans;

namespace {

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

}  // namespace

template <typename S>
void embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int T,
                       int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; ++bt) {
    S* o = out + static_cast<int64_t>(bt) * C;
    const S* e = tokens[bt] >= 0 ? wte + static_cast<int64_t>(tokens[bt]) * C : nullptr;
    const S* p = wpe ? wpe + static_cast<int64_t>(bt % T) * C : nullptr;
    for (int c = 0; c < C; ++c) o[c] = (e ? e[c] : S(0)) + (p ? p[c] : S(0));
  }
}

template <typename S>
void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tokens, int B, int T,
                        int C) {
  // Rows with the same token collide in dwte, so rows are walked in order; positions are
  // distinct per t, so dwpe is parallel over t.
  for (int bt = 0; bt < B * T; ++bt) {
    if (tokens[bt] < 0) continue;
    S* e = dwte + static_cast<int64_t>(tokens[bt]) * C;
    const S* d = dout + static_cast<int64_t>(bt) * C;
    for (int c = 0; c < C; ++c) e[c] += d[c];
  }
  if (dwpe == nullptr) return;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    S* p = dwpe + static_cast<int64_t>(t) * C;
    for (int b = 0; b < B; ++b) {
      const S* d = dout + (static_cast<int64_t>(b) * T + t) * C;
      for (int c = 0; c < C; ++c) p[c] += d[c];
    }
  }
}

template <typename S>
void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* weight, const S* bias,
                       int N, int C) {
  const S eps = S(1e-5);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const S* x = inp + static_cast<int64_t>(n) * C;
    S m = 0;
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; ++c) m += x[c];
    m /= S(C);
    S var = 0;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= S(C);
    const S s = S(1) / std::sqrt(var + eps);
    S* o = out + static_cast<int64_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename S>
void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                        const S* weight, const S* mean, const S* rstd, int N, int C) {
#pragma omp parallel
  {
    // Per-thread partial sums for the parameter gradients, added once at the end.
    std::vector<S> dw(C, S(0)), db(C, S(0));
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const S* x = inp + static_cast<int64_t>(n) * C;
      const S* d = dout + static_cast<int64_t>(n) * C;
      S* dx = dinp + static_cast<int64_t>(n) * C;
      const S m = mean[n], s = rstd[n];
      S dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int c = 0; c < C; ++c) {
        const S norm = (x[c] - m) * s;
        const S dnorm = weight[c] * d[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= S(C);
      dnorm_norm_mean /= S(C);
      for (int c = 0; c < C; ++c) {
        const S norm = (x[c] - m) * s;
        const S dnorm = weight[c] * d[c];
        db[c] += d[c];
        dw[c] += norm * d[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
#pragma omp critical
    for (int c = 0; c < C; ++c) {
      dweight[c] += dw[c];
      dbias[c] += db[c];
    }
  }
}

template <typename S>
void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int C, int OC,
                    bool accumulate) {
  // Bias first (broadcast over rows), then one GEMM with beta = 1.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    S* o = out + static_cast<int64_t>(n) * OC;
    if (bias == nullptr) {
      if (!accumulate) std::memset(o, 0, sizeof(S) * OC);
    } else if (accumulate) {
      for (int j = 0; j < OC; ++j) o[j] += bias[j];
    } else {
      std::memcpy(o, bias, sizeof(S) * OC);
    }
  }
  gemm<S>(Trans::kNo, Trans::kYes, N, OC, C, S(1), inp, C, weight, C, S(1), out, OC);
}

template <typename S>
void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                     const S* weight, int N, int C, int OC, bool accumulate_dinp) {
  if (dinp != nullptr) {
    gemm<S>(Trans::kNo, Trans::kNo, N, C, OC, S(1), dout, OC, weight, C,
            accumulate_dinp ? S(1) : S(0), dinp, C);
  }
  if (dweight != nullptr) gemm<S>(Trans::kYes, Trans::kNo, OC, C, N, S(1), dout, OC, inp, C, S(1), dweight, C);
  if (dbias == nullptr) return;
  // dbias: column sums of dout, in column blocks so each thread owns its columns.
  constexpr int kBlock = 64;
  const int nblocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int j0 = blk * kBlock, j1 = std::min(OC, j0 + kBlock);
    S acc[kBlock] = {};
    for (int n = 0; n < N; ++n) {
      const S* d = dout + static_cast<int64_t>(n) * OC;
      for (int j = j0; j < j1; ++j) acc[j - j0] += d[j];
    }
    for (int j = j0; j < j1; ++j) dbias[j] += acc[j - j0];
  }
}

namespace {
// Query head h of sample b in the fused qkv layout, with the K, V columns of its kv head.
template <typename S>
struct QkvHead {
  const S *q, *k, *v;
};
template <typename S>
QkvHead<S> qkv_head(const S* qkv, int b, int h, int T, int NH, int KVH, int hs) {
  const S* base = qkv + static_cast<int64_t>(b) * T * (NH + 2 * KVH) * hs;
  const int kvh = h / (NH / KVH);
  return {base + h * hs, base + (NH + kvh) * hs, base + (NH + KVH + kvh) * hs};
}
// Sample b's rows of the fused qkv layout [q heads | k heads | v heads] and of its gradient, with
// kv head kvh's K, V columns (a backward's unit of parallel work: its query heads share dK, dV).
template <typename S>
struct KvGroup {
  const S *base, *k, *v;
  S *dbase, *dk, *dv;
};
template <typename S>
KvGroup<S> kv_group(const S* qkv, S* dqkv, int b, int kvh, int T, int NH, int KVH, int hs) {
  const int64_t row0 = static_cast<int64_t>(b) * T * (NH + 2 * KVH) * hs;
  KvGroup<S> g{qkv + row0, nullptr, nullptr, dqkv + row0, nullptr, nullptr};
  g.k = g.base + (NH + kvh) * hs, g.v = g.base + (NH + KVH + kvh) * hs;
  g.dk = g.dbase + (NH + kvh) * hs, g.dv = g.dbase + (NH + KVH + kvh) * hs;
  return g;
}
}  // namespace

template <typename S>
void attention_forward(S* out, S* att, const S* qkv, int B, int T, int NH, int KVH, int hs) {
  const int C = NH * hs, QKV = (NH + 2 * KVH) * hs;
  const int Tb = attention_row_block(T);
  const S scale = S(1) / std::sqrt(S(hs));
  // One GEMM per (b, h, row block): OpenMP over (b, h), OpenBLAS single-threaded inside.
  compute::BlasSingleThreaded one_thread;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const auto [q, k, v] = qkv_head(qkv, b, h, T, NH, KVH, hs);
    S* p = att + static_cast<int64_t>(bh) * T * T;
    S* y = out + static_cast<int64_t>(b) * T * C + h * hs;
    // Causal: rows [i0, i1) only see columns [0, i1), so blocks skip the upper triangle.
    for (int i0 = 0; i0 < T; i0 += Tb) {
      const int i1 = std::min(T, i0 + Tb), r = i1 - i0;
      gemm<S>(Trans::kNo, Trans::kYes, r, i1, hs, scale, q + static_cast<int64_t>(i0) * QKV,
              QKV, k, QKV, S(0), p + static_cast<int64_t>(i0) * T, T);
      for (int t = i0; t < i1; ++t) {
        S* row = p + static_cast<int64_t>(t) * T;
        S mx = row[0];
#pragma omp simd reduction(max : mx)
        for (int j = 1; j <= t; ++j) mx = std::max(mx, row[j]);
        S sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j <= t; ++j) {
          row[j] = exp_(row[j] - mx);
          sum += row[j];
        }
        const S inv = S(1) / sum;
#pragma omp simd
        for (int j = 0; j <= t; ++j) row[j] *= inv;
        for (int j = t + 1; j < T; ++j) row[j] = S(0);
      }
      gemm<S>(Trans::kNo, Trans::kNo, r, hs, i1, S(1), p + static_cast<int64_t>(i0) * T, T, v,
              QKV, S(0), y + static_cast<int64_t>(i0) * C, C);
    }
  }
}


template <typename S>
void attention_backward(S* dqkv, S* datt, const S* dout, const S* qkv, const S* att, int B,
                        int T, int NH, int KVH, int hs) {
  const int C = NH * hs, QKV = (NH + 2 * KVH) * hs, group = NH / KVH;
  const int Tb = attention_row_block(T);
  const S scale = S(1) / std::sqrt(S(hs));
  std::memset(dqkv, 0, sizeof(S) * static_cast<size_t>(B) * T * QKV);
  compute::BlasSingleThreaded one_thread;
  // Parallel over (b, kv head): the query heads of one group accumulate into the same dK, dV,
  // so they run in order inside one iteration.
#pragma omp parallel for schedule(static)
  for (int bg = 0; bg < B * KVH; ++bg) {
    const int b = bg / KVH, kvh = bg % KVH;
    const KvGroup<S> g = kv_group(qkv, dqkv, b, kvh, T, NH, KVH, hs);
    const S *base = g.base, *k = g.k, *v = g.v;
    S *dbase = g.dbase, *dk = g.dk, *dv = g.dv;
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      const int64_t bh = static_cast<int64_t>(b) * NH + h;
      const S* q = base + h * hs;
      S* dq = dbase + h * hs;
      const S* p = att + bh * T * T;
      S* ds = datt + bh * T * T;
      const S* dy = dout + static_cast<int64_t>(b) * T * C + h * hs;
      for (int i0 = 0; i0 < T; i0 += Tb) {
        const int i1 = std::min(T, i0 + Tb), r = i1 - i0;
        const S* pb = p + static_cast<int64_t>(i0) * T;
        S* dsb = ds + static_cast<int64_t>(i0) * T;
        const S* dyb = dy + static_cast<int64_t>(i0) * C;
        // dP = dY V^T, then the softmax backward in place: dS = P * (dP - sum_j P dP).
        gemm<S>(Trans::kNo, Trans::kYes, r, i1, hs, S(1), dyb, C, v, QKV, S(0), dsb, T);
        for (int t = i0; t < i1; ++t) {
          const S* prow = p + static_cast<int64_t>(t) * T;
          S* drow = ds + static_cast<int64_t>(t) * T;
          S dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int j = 0; j <= t; ++j) dot += prow[j] * drow[j];
#pragma omp simd
          for (int j = 0; j <= t; ++j) drow[j] = prow[j] * (drow[j] - dot);
          for (int j = t + 1; j < i1; ++j) drow[j] = S(0);
        }
        // S = scale * Q K^T: dQ = scale * dS K, dK += scale * dS^T Q, dV += P^T dY.
        gemm<S>(Trans::kNo, Trans::kNo, r, hs, i1, scale, dsb, T, k, QKV, S(0),
                dq + static_cast<int64_t>(i0) * QKV, QKV);
        gemm<S>(Trans::kYes, Trans::kNo, i1, hs, r, scale, dsb, T,
                q + static_cast<int64_t>(i0) * QKV, QKV, S(1), dk, QKV);
        gemm<S>(Trans::kYes, Trans::kNo, i1, hs, r, S(1), pb, T, dyb, C, S(1), dv, QKV);
      }
    }
  }
}

namespace {
template <typename S>
constexpr S kGeluScale = S(0.7978845608028654);  // sqrt(2/pi)
}

template <typename S>
void gelu_forward(S* out, const S* inp, int64_t N) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const S x = inp[i];
    const S cube = S(0.044715) * x * x * x;
    out[i] = S(0.5) * x * (S(1) + tanh_(kGeluScale<S> * (x + cube)));
  }
}

template <typename S>
void gelu_backward(S* dinp, const S* inp, const S* dout, int64_t N) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const S x = inp[i];
    const S cube = S(0.044715) * x * x * x;
    const S arg = kGeluScale<S> * (x + cube);
    const S th = tanh_(arg);
    const S sech2 = S(1) - th * th;
    const S local = S(0.5) * (S(1) + th) +
                    x * S(0.5) * sech2 * kGeluScale<S> * (S(1) + S(3) * S(0.044715) * x * x);
    dinp[i] = local * dout[i];
  }
}

template <typename S>
void residual_forward(S* out, const S* a, const S* b, int64_t N) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

template <typename S>
void residual_backward(S* da, S* db, const S* dout, int64_t N) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

template <typename S>
S crossentropy_forward(S* probs, S* losses, const S* logits, const int32_t* targets, int N,
                       int V) {
  double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (int n = 0; n < N; ++n) {
    const S* x = logits + static_cast<int64_t>(n) * V;
    S* p = probs + static_cast<int64_t>(n) * V;
    S mx = x[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < V; ++j) mx = std::max(mx, x[j]);
    const S xt = x[targets[n]];
    S sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; ++j) {
      p[j] = exp_(x[j] - mx);
      sum += p[j];
    }
    const S inv = S(1) / sum;
#pragma omp simd
    for (int j = 0; j < V; ++j) p[j] *= inv;
    losses[n] = std::log(sum) - (xt - mx);  // -log softmax(x)[target], without log(0)
    total += static_cast<double>(losses[n]);
  }
  return static_cast<S>(total / N);
}

template <typename S>
void crossentropy_backward(S* dlogits, const S* probs, const int32_t* targets, S dloss, int N,
                           int V) {
  const S scale = dloss / S(N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const S* p = probs + static_cast<int64_t>(n) * V;
    S* d = dlogits + static_cast<int64_t>(n) * V;
#pragma omp simd
    for (int j = 0; j < V; ++j) d[j] = p[j] * scale;
    if (targets[n] >= 0) d[targets[n]] -= scale;
  }
}

template <typename S>
void crossentropy_rowmax(S* rowmax, const S* logits, int N, int V, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const S* x = logits + static_cast<int64_t>(n) * V;
    S mx = -std::numeric_limits<S>::infinity();
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < valid; ++j) mx = std::max(mx, x[j]);
    rowmax[n] = mx;
  }
}

template <typename S>
void crossentropy_partial(S* probs, S* sumexp, S* tlogit, const S* logits, const S* rowmax,
                          const int32_t* targets, int N, int V, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const S* x = logits + static_cast<int64_t>(n) * V;
    S* p = probs + static_cast<int64_t>(n) * V;
    const S mx = rowmax[n];
    tlogit[n] = targets[n] >= 0 ? x[targets[n]] : S(0);  // before p (may alias x) is written
    S sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < valid; ++j) {
      p[j] = exp_(x[j] - mx);
      sum += p[j];
    }
    for (int j = valid; j < V; ++j) p[j] = S(0);
    sumexp[n] = sum;
  }
}

template <typename S>
S crossentropy_finish(S* probs, S* losses, const S* sumexp, const S* tlogit, const S* rowmax, int N,
                      int V) {
  double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (int n = 0; n < N; ++n) {
    S* p = probs + static_cast<int64_t>(n) * V;
    const S inv = S(1) / sumexp[n];
#pragma omp simd
    for (int j = 0; j < V; ++j) p[j] *= inv;
    losses[n] = std::log(sumexp[n]) - (tlogit[n] - rowmax[n]);
    total += static_cast<double>(losses[n]);
  }
  return static_cast<S>(total / N);
}

template <typename S>
void bias_residual_add(S* out, const S* x, const S* bias, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    S* o = out + static_cast<int64_t>(n) * C;
    const S* xi = x + static_cast<int64_t>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] += xi[c] + bias[c];
  }
}

template <typename S>
int64_t adamw_update(S* param, const S* grad, S* m, S* v, int64_t n, const AdamWConfig& cfg,
                     double weight_decay, int t) {
  // 1 - beta in double, then rounded: 1 - 0.999f in float is off by 1.3e-5 relative.
  const S lr = S(cfg.lr), b1 = S(cfg.beta1), b2 = S(cfg.beta2), eps = S(cfg.eps);
  const S omb1 = S(1.0 - cfg.beta1), omb2 = S(1.0 - cfg.beta2);
  const S decay = S(1.0 - cfg.lr * weight_decay);
  const S bc1 = S(1.0 - std::pow(cfg.beta1, t));
  const S bc2_sqrt = S(std::sqrt(1.0 - std::pow(cfg.beta2, t)));
  const S step = lr / bc1;
  int64_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : bad)
  for (int64_t i = 0; i < n; ++i) {
    const S g = grad[i];
    bad += std::isfinite(g) ? 0 : 1;
    const S mi = b1 * m[i] + omb1 * g;
    const S vi = b2 * v[i] + omb2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
  return bad;
}

template <typename S>
void attention_chunk_forward(S* o, int ldo, S* lse, const S* q, int ldq, const S* k, int ldk, const S* v,
                             int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0, bool first) {
  const int group = NH / KVH;
  const S scale = S(1) / std::sqrt(S(hs));
  const S ninf = -std::numeric_limits<S>::infinity();
  compute::BlasSingleThreaded one_thread;
#pragma omp parallel
  {
    std::vector<S> sc(static_cast<size_t>(Tq) * Tk), ob(static_cast<size_t>(Tq) * hs);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH, kvh = h / group;
      const S* qb = q + static_cast<int64_t>(b) * Tq * ldq + h * hs;
      const S* kb = k + static_cast<int64_t>(b) * Tk * ldk + kvh * hs;
      const S* vb = v + static_cast<int64_t>(b) * Tk * ldv + kvh * hs;
      S* obh = o + static_cast<int64_t>(b) * Tq * ldo + h * hs;
      S* l = lse + static_cast<int64_t>(bh) * Tq;
      gemm<S>(Trans::kNo, Trans::kYes, Tq, Tk, hs, scale, qb, ldq, kb, ldk, S(0), sc.data(), Tk);
      std::vector<S> cl(static_cast<size_t>(Tq));  // this chunk's log-sum-exp per row
      for (int i = 0; i < Tq; ++i) {
        S* row = sc.data() + static_cast<int64_t>(i) * Tk;
        const int vis = std::min(Tk, q0 + i - k0 + 1);  // keys j < vis are visible
        if (vis <= 0) {
          cl[size_t(i)] = ninf;
          for (int j = 0; j < Tk; ++j) row[j] = S(0);
          continue;
        }
        S mx = row[0];
        for (int j = 1; j < vis; ++j) mx = std::max(mx, row[j]);
        S sum = 0;
        for (int j = 0; j < vis; ++j) {
          row[j] = exp_(row[j] - mx);
          sum += row[j];
        }
        const S inv = S(1) / sum;
        for (int j = 0; j < vis; ++j) row[j] *= inv;
        for (int j = vis; j < Tk; ++j) row[j] = S(0);
        cl[size_t(i)] = mx + std::log(sum);
      }
      gemm<S>(Trans::kNo, Trans::kNo, Tq, hs, Tk, S(1), sc.data(), Tk, vb, ldv, S(0), ob.data(), hs);
      for (int i = 0; i < Tq; ++i) {
        S* out = obh + static_cast<int64_t>(i) * ldo;
        const S* part = ob.data() + static_cast<int64_t>(i) * hs;
        const S c = cl[size_t(i)];
        if (first) {
          for (int d = 0; d < hs; ++d) out[d] = part[d];
          l[i] = c;
          continue;
        }
        if (c == ninf) continue;
        const S old = l[i], m = std::max(old, c);
        const S wo = old == ninf ? S(0) : exp_(old - m), wc = exp_(c - m), tot = wo + wc;
        for (int d = 0; d < hs; ++d) out[d] = (out[d] * wo + part[d] * wc) / tot;
        l[i] = m + std::log(tot);
      }
    }
  }
}

template <typename S>
void attention_chunk_backward(S* dq, int lddq, S* dk, int lddk, S* dv, int lddv, const S* dout, int lddo,
                              const S* D, const S* lse, const S* q, int ldq, const S* k, int ldk, const S* v,
                              int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0) {
  const int group = NH / KVH;
  const S scale = S(1) / std::sqrt(S(hs));
  compute::BlasSingleThreaded one_thread;
  // Parallel over (b, kv head): a group's query heads accumulate into the same dK, dV.
#pragma omp parallel
  {
    std::vector<S> p(static_cast<size_t>(Tq) * Tk), ds(p.size());
#pragma omp for schedule(static)
    for (int bg = 0; bg < B * KVH; ++bg) {
      const int b = bg / KVH, kvh = bg % KVH;
      const S* kb = k + static_cast<int64_t>(b) * Tk * ldk + kvh * hs;
      const S* vb = v + static_cast<int64_t>(b) * Tk * ldv + kvh * hs;
      S* dkb = dk + static_cast<int64_t>(b) * Tk * lddk + kvh * hs;
      S* dvb = dv + static_cast<int64_t>(b) * Tk * lddv + kvh * hs;
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t bh = static_cast<int64_t>(b) * NH + h;
        const S* qb = q + static_cast<int64_t>(b) * Tq * ldq + h * hs;
        const S* dyb = dout + static_cast<int64_t>(b) * Tq * lddo + h * hs;
        S* dqb = dq + static_cast<int64_t>(b) * Tq * lddq + h * hs;
        const S* l = lse + bh * Tq;
        const S* Dr = D + bh * Tq;
        gemm<S>(Trans::kNo, Trans::kYes, Tq, Tk, hs, scale, qb, ldq, kb, ldk, S(0), p.data(), Tk);
        gemm<S>(Trans::kNo, Trans::kYes, Tq, Tk, hs, S(1), dyb, lddo, vb, ldv, S(0), ds.data(), Tk);
        for (int i = 0; i < Tq; ++i) {
          S* pr = p.data() + static_cast<int64_t>(i) * Tk;
          S* dr = ds.data() + static_cast<int64_t>(i) * Tk;
          const int vis = std::max(0, std::min(Tk, q0 + i - k0 + 1));
          for (int j = 0; j < vis; ++j) {
            pr[j] = exp_(pr[j] - l[i]);
            dr[j] = pr[j] * (dr[j] - Dr[i]);
          }
          for (int j = vis; j < Tk; ++j) pr[j] = dr[j] = S(0);
        }
        gemm<S>(Trans::kNo, Trans::kNo, Tq, hs, Tk, scale, ds.data(), Tk, kb, ldk, S(1), dqb, lddq);
        gemm<S>(Trans::kYes, Trans::kNo, Tk, hs, Tq, scale, ds.data(), Tk, qb, ldq, S(1), dkb, lddk);
        gemm<S>(Trans::kYes, Trans::kNo, Tk, hs, Tq, S(1), p.data(), Tk, dyb, lddo, S(1), dvb, lddv);
      }
    }
  }
}

template <typename S>
void flash_attention_forward(S* out, S* lse, const S* qkv, int B, int T, int NH, int KVH, int hs) {
  const int C = NH * hs, QKV = (NH + 2 * KVH) * hs;
  const S scale = S(1) / std::sqrt(S(hs));
  const S ninf = -std::numeric_limits<S>::infinity();
  constexpr int Bq = kFlashTileQ, Bk = kFlashTileK;
  compute::BlasSingleThreaded one_thread;
#pragma omp parallel
  {
    std::vector<S> sc(static_cast<size_t>(Bq) * Bk), acc(static_cast<size_t>(Bq) * hs), mx(Bq), sum(Bq);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const auto [q, k, v] = qkv_head(qkv, b, h, T, NH, KVH, hs);
      S* y = out + static_cast<int64_t>(b) * T * C + h * hs;
      S* l = lse + static_cast<int64_t>(bh) * T;
      for (int i0 = 0; i0 < T; i0 += Bq) {
        const int r = std::min(Bq, T - i0);
        std::fill(acc.begin(), acc.end(), S(0));
        std::fill(mx.begin(), mx.end(), ninf);
        std::fill(sum.begin(), sum.end(), S(0));
        for (int j0 = 0; j0 < i0 + r; j0 += Bk) {  // key tiles up to the tile's last row
          const int c = std::min(Bk, i0 + r - j0);
          gemm<S>(Trans::kNo, Trans::kYes, r, c, hs, scale, q + static_cast<int64_t>(i0) * QKV, QKV,
                  k + static_cast<int64_t>(j0) * QKV, QKV, S(0), sc.data(), Bk);
          for (int t = 0; t < r; ++t) {
            S* row = sc.data() + static_cast<int64_t>(t) * Bk;
            const int vis = std::min(c, i0 + t - j0 + 1);  // keys j < vis are visible to this row
            if (vis <= 0) {
              std::fill(row, row + c, S(0));
              continue;
            }
            S m = mx[size_t(t)];
            for (int j = 0; j < vis; ++j) m = std::max(m, row[j]);
            const S corr = mx[size_t(t)] == ninf ? S(0) : exp_(mx[size_t(t)] - m);
            S add = 0;
            for (int j = 0; j < vis; ++j) {
              row[j] = exp_(row[j] - m);
              add += row[j];
            }
            for (int j = vis; j < c; ++j) row[j] = S(0);
            sum[size_t(t)] = sum[size_t(t)] * corr + add;
            mx[size_t(t)] = m;
            S* a = acc.data() + static_cast<int64_t>(t) * hs;
            for (int d = 0; d < hs; ++d) a[d] *= corr;
          }
          gemm<S>(Trans::kNo, Trans::kNo, r, hs, c, S(1), sc.data(), Bk, v + static_cast<int64_t>(j0) * QKV, QKV, S(1),
                  acc.data(), hs);
        }
        for (int t = 0; t < r; ++t) {  // every row sees at least its own key
          const S inv = S(1) / sum[size_t(t)];
          S* o = y + static_cast<int64_t>(i0 + t) * C;
          const S* a = acc.data() + static_cast<int64_t>(t) * hs;
          for (int d = 0; d < hs; ++d) o[d] = a[d] * inv;
          l[i0 + t] = mx[size_t(t)] + std::log(sum[size_t(t)]);
        }
      }
    }
  }
}

template <typename S>
void flash_attention_backward(S* dqkv, const S* dout, const S* qkv, const S* out, const S* lse, int B, int T, int NH,
                              int KVH, int hs) {
  const int C = NH * hs, QKV = (NH + 2 * KVH) * hs, group = NH / KVH;
  const S scale = S(1) / std::sqrt(S(hs));
  constexpr int Bq = kFlashTileQ, Bk = kFlashTileK;
  std::memset(dqkv, 0, sizeof(S) * static_cast<size_t>(B) * T * QKV);
  compute::BlasSingleThreaded one_thread;
  // Parallel over (b, kv head): a group's query heads accumulate into the same dK, dV.
#pragma omp parallel
  {
    std::vector<S> p(static_cast<size_t>(Bq) * Bk), ds(p.size()), D(static_cast<size_t>(T));
#pragma omp for schedule(static)
    for (int bg = 0; bg < B * KVH; ++bg) {
      const int b = bg / KVH, kvh = bg % KVH;
      const KvGroup<S> g = kv_group(qkv, dqkv, b, kvh, T, NH, KVH, hs);
      const S *k = g.k, *v = g.v;
      S *dk = g.dk, *dv = g.dv;
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        const S* q = g.base + h * hs;
        S* dq = g.dbase + h * hs;
        const S* dy = dout + static_cast<int64_t>(b) * T * C + h * hs;
        const S* y = out + static_cast<int64_t>(b) * T * C + h * hs;
        const S* l = lse + (static_cast<int64_t>(b) * NH + h) * T;
        for (int t = 0; t < T; ++t) {  // D = rowsum(dO * O)
          S acc = 0;
          for (int d = 0; d < hs; ++d) acc += dy[static_cast<int64_t>(t) * C + d] * y[static_cast<int64_t>(t) * C + d];
          D[size_t(t)] = acc;
        }
        for (int j0 = 0; j0 < T; j0 += Bk) {
          const int c = std::min(Bk, T - j0);
          for (int i0 = j0 / Bq * Bq; i0 < T; i0 += Bq) {  // the query tiles that see this key tile
            const int r = std::min(Bq, T - i0);
            gemm<S>(Trans::kNo, Trans::kYes, r, c, hs, scale, q + static_cast<int64_t>(i0) * QKV, QKV,
                    k + static_cast<int64_t>(j0) * QKV, QKV, S(0), p.data(), Bk);
            gemm<S>(Trans::kNo, Trans::kYes, r, c, hs, S(1), dy + static_cast<int64_t>(i0) * C, C,
                    v + static_cast<int64_t>(j0) * QKV, QKV, S(0), ds.data(), Bk);
            for (int t = 0; t < r; ++t) {
              S* pr = p.data() + static_cast<int64_t>(t) * Bk;
              S* dr = ds.data() + static_cast<int64_t>(t) * Bk;
              const int vis = std::max(0, std::min(c, i0 + t - j0 + 1));
              const S lt = l[i0 + t], Dt = D[size_t(i0 + t)];
              for (int j = 0; j < vis; ++j) {
                pr[j] = exp_(pr[j] - lt);
                dr[j] = pr[j] * (dr[j] - Dt);
              }
              for (int j = vis; j < c; ++j) pr[j] = dr[j] = S(0);
            }
            // dV += P^T dO, dK += scale dS^T Q, dQ += scale dS K
            gemm<S>(Trans::kYes, Trans::kNo, c, hs, r, S(1), p.data(), Bk, dy + static_cast<int64_t>(i0) * C, C, S(1),
                    dv + static_cast<int64_t>(j0) * QKV, QKV);
            gemm<S>(Trans::kYes, Trans::kNo, c, hs, r, scale, ds.data(), Bk, q + static_cast<int64_t>(i0) * QKV, QKV,
                    S(1), dk + static_cast<int64_t>(j0) * QKV, QKV);
            gemm<S>(Trans::kNo, Trans::kNo, r, hs, c, scale, ds.data(), Bk, k + static_cast<int64_t>(j0) * QKV, QKV,
                    S(1), dq + static_cast<int64_t>(i0) * QKV, QKV);
          }
        }
      }
    }
  }
}

template <typename S>
void attention_rowdot(S* D, const S* dout, int lddo, const S* o, int ldo, int B, int T, int NH, int hs) {
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    for (int i = 0; i < T; ++i) {
      const S* a = dout + (static_cast<int64_t>(b) * T + i) * lddo + h * hs;
      const S* c = o + (static_cast<int64_t>(b) * T + i) * ldo + h * hs;
      S acc = 0;
      for (int d = 0; d < hs; ++d) acc += a[d] * c[d];
      D[static_cast<int64_t>(bh) * T + i] = acc;
    }
  }
}

template <typename S>
void copy_2d(S* dst, int64_t ld_dst, const S* src, int64_t ld_src, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * ld_dst, src + r * ld_src, sizeof(S) * cols);
}

template <typename S>
void add_2d(S* dst, int64_t ld_dst, const S* src, int64_t ld_src, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * ld_dst + c] += src[r * ld_src + c];
}

#define MB_INSTANTIATE(S)                                                                     \
  template void embedding_forward<S>(S*, const int32_t*, const S*, const S*, int, int, int);  \
  template void embedding_backward<S>(S*, S*, const S*, const int32_t*, int, int, int);       \
  template void layernorm_forward<S>(S*, S*, S*, const S*, const S*, const S*, int, int);     \
  template void layernorm_backward<S>(S*, S*, S*, const S*, const S*, const S*, const S*,     \
                                      const S*, int, int);                                    \
  template void matmul_forward<S>(S*, const S*, const S*, const S*, int, int, int, bool);     \
  template void matmul_backward<S>(S*, S*, S*, const S*, const S*, const S*, int, int, int,   \
                                   bool);                                                     \
  template void attention_forward<S>(S*, S*, const S*, int, int, int, int, int);              \
  template void attention_backward<S>(S*, S*, const S*, const S*, const S*, int, int, int,    \
                                      int, int);                                              \
  template void gelu_forward<S>(S*, const S*, int64_t);                                       \
  template void gelu_backward<S>(S*, const S*, const S*, int64_t);                            \
  template void residual_forward<S>(S*, const S*, const S*, int64_t);                         \
  template void residual_backward<S>(S*, S*, const S*, int64_t);                              \
  template S crossentropy_forward<S>(S*, S*, const S*, const int32_t*, int, int);             \
  template void crossentropy_backward<S>(S*, const S*, const int32_t*, S, int, int);          \
  template void crossentropy_rowmax<S>(S*, const S*, int, int, int);                          \
  template void crossentropy_partial<S>(S*, S*, S*, const S*, const S*, const int32_t*, int,  \
                                        int, int);                                            \
  template S crossentropy_finish<S>(S*, S*, const S*, const S*, const S*, int, int);          \
  template void bias_residual_add<S>(S*, const S*, const S*, int, int);                       \
  template void attention_chunk_forward<S>(S*, int, S*, const S*, int, const S*, int, const S*, int, int, \
                                           int, int, int, int, int, int, int, bool);              \
  template void attention_chunk_backward<S>(S*, int, S*, int, S*, int, const S*, int, const S*,     \
                                            const S*, const S*, int, const S*, int, const S*, int,  \
                                            int, int, int, int, int, int, int, int);                \
  template void attention_rowdot<S>(S*, const S*, int, const S*, int, int, int, int, int);        \
  template void flash_attention_forward<S>(S*, S*, const S*, int, int, int, int, int);           \
  template void flash_attention_backward<S>(S*, const S*, const S*, const S*, const S*, int, int, int, int, int); \
  template void copy_2d<S>(S*, int64_t, const S*, int64_t, int64_t, int64_t);                    \
  template void add_2d<S>(S*, int64_t, const S*, int64_t, int64_t, int64_t);                     \
  template int64_t adamw_update<S>(S*, const S*, S*, S*, int64_t, const AdamWConfig&, double, int);

MB_INSTANTIATE(float)
MB_INSTANTIATE(double)
#undef MB_INSTANTIATE

std::vector<float> adamw_first_step(const Layout& layout, const std::vector<float>& params0,
                                    const std::vector<float>& grads, const AdamWConfig& cfg) {
  std::vector<float> p(params0), m(params0.size(), 0.f), v(params0.size(), 0.f);
  for (const auto& e : layout.entries())
    adamw_update(p.data() + e.offset, grads.data() + e.offset, m.data() + e.offset, v.data() + e.offset, e.numel, cfg,
                 e.weight_decay ? cfg.weight_decay : 0.0, 1);
  return p;
}

}  // namespace meshbench::parallel
