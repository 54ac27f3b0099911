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
#include "kernels/fast_math.hpp"

namespace meshbench::parallel {

using compute::gemm;
using compute::Trans;

// exp_ and tanh_: kernels/fast_math.hpp
using fastmath::exp_;
using fastmath::tanh_;

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
  template void copy_2d<S>(S*, int64_t, const S*, int64_t, int64_t, int64_t);                 \
  template void add_2d<S>(S*, int64_t, const S*, int64_t, int64_t, int64_t);                  \
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
