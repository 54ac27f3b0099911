// CPU forward/backward pairs of the MoE operations declared in moe_layers.hpp.
// Instantiated for float (the engine) and double (gradient checks).
#include "kernels/moe_layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace meshbench::parallel {

template <typename S>
void moe_topk_forward(int32_t* idx, S* gates, S* probs, const S* logits, int N, int E, int k,
                      bool assigned) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const S* z = logits + static_cast<int64_t>(n) * E;
    S* p = probs + static_cast<int64_t>(n) * E;
    S mx = z[0];
    for (int e = 1; e < E; ++e) mx = std::max(mx, z[e]);
    S sum = 0;
    for (int e = 0; e < E; ++e) {
      p[e] = std::exp(z[e] - mx);
      sum += p[e];
    }
    for (int e = 0; e < E; ++e) p[e] /= sum;
    int32_t* id = idx + static_cast<int64_t>(n) * k;
    if (!assigned) {
      // k passes of argmax over the experts not yet chosen; strict > keeps the lower index.
      for (int j = 0; j < k; ++j) {
        int best = -1;
        for (int e = 0; e < E; ++e) {
          bool taken = false;
          for (int i = 0; i < j; ++i) taken = taken || id[i] == e;
          if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        id[j] = best;
      }
    }
    S* g = gates + static_cast<int64_t>(n) * k;
    S chosen = 0;
    for (int j = 0; j < k; ++j) chosen += p[id[j]];
    for (int j = 0; j < k; ++j) g[j] = p[id[j]] / chosen;
  }
}

template <typename S>
void moe_topk_backward(S* dlogits, const S* dgates, const S* dprobs, const S* probs,
                       const S* gates, const int32_t* idx, int N, int E, int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const S* p = probs + static_cast<int64_t>(n) * E;
    S* dz = dlogits + static_cast<int64_t>(n) * E;
    // The full softmax's backward from the aux loss: dz = p * (a - p . a).
    S pa = 0;
    if (dprobs != nullptr)
      for (int e = 0; e < E; ++e) pa += p[e] * dprobs[e];
    for (int e = 0; e < E; ++e) dz[e] = dprobs != nullptr ? p[e] * (dprobs[e] - pa) : S(0);
    // The gates are the softmax of the chosen logits: dz[chosen j] += g_j (dg_j - g . dg).
    const S* g = gates + static_cast<int64_t>(n) * k;
    const S* dg = dgates + static_cast<int64_t>(n) * k;
    const int32_t* id = idx + static_cast<int64_t>(n) * k;
    S gdg = 0;
    for (int j = 0; j < k; ++j) gdg += g[j] * dg[j];
    for (int j = 0; j < k; ++j) dz[id[j]] += g[j] * (dg[j] - gdg);
  }
}

template <typename S>
void moe_plan(int32_t* slot, int32_t* counts, S* prob_sum, const int32_t* idx, const S* probs,
              int N, int E, int k, int capacity) {
  int32_t* routed = counts;
  int32_t* offsets = counts + E;
  std::fill(routed, routed + E, 0);
  // Pass 1: each assignment's rank among its expert's assignments in token order.
  for (int64_t a = 0; a < static_cast<int64_t>(N) * k; ++a) slot[a] = routed[idx[a]]++;
  offsets[0] = 0;
  for (int e = 0; e < E; ++e) {
    const int kept = capacity > 0 ? std::min(routed[e], capacity) : routed[e];
    offsets[e + 1] = offsets[e] + kept;
  }
  // Pass 2: rank -> row, or -1 beyond the capacity.
  for (int64_t a = 0; a < static_cast<int64_t>(N) * k; ++a) {
    const int e = idx[a];
    slot[a] = slot[a] < offsets[e + 1] - offsets[e] ? offsets[e] + slot[a] : -1;
  }
  for (int e = 0; e < E; ++e) {
    S s = 0;
    for (int n = 0; n < N; ++n) s += probs[static_cast<int64_t>(n) * E + e];
    prob_sum[e] = s;
  }
}

template <typename S>
void moe_permute_forward(S* xp, const S* x, const int32_t* slot, int N, int C, int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < k; ++j) {
      const int32_t r = slot[static_cast<int64_t>(n) * k + j];
      if (r >= 0)
        std::memcpy(xp + static_cast<int64_t>(r) * C, x + static_cast<int64_t>(n) * C, sizeof(S) * C);
    }
}

template <typename S>
void moe_permute_backward(S* dx, const S* dxp, const int32_t* slot, int N, int C, int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    S* d = dx + static_cast<int64_t>(n) * C;
    std::fill(d, d + C, S(0));
    for (int j = 0; j < k; ++j) {
      const int32_t r = slot[static_cast<int64_t>(n) * k + j];
      if (r < 0) continue;
      const S* s = dxp + static_cast<int64_t>(r) * C;
      for (int c = 0; c < C; ++c) d[c] += s[c];
    }
  }
}

template <typename S>
void moe_unpermute_forward(S* out, const S* yp, const S* gates, const int32_t* slot, int N, int C,
                           int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    S* o = out + static_cast<int64_t>(n) * C;
    for (int j = 0; j < k; ++j) {
      const int64_t a = static_cast<int64_t>(n) * k + j;
      if (slot[a] < 0) continue;
      const S* y = yp + static_cast<int64_t>(slot[a]) * C;
      const S g = gates[a];
      for (int c = 0; c < C; ++c) o[c] += g * y[c];
    }
  }
}

template <typename S>
void moe_unpermute_backward(S* dyp, S* dgates, const S* dout, const S* yp, const S* gates,
                            const int32_t* slot, int N, int C, int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const S* d = dout + static_cast<int64_t>(n) * C;
    for (int j = 0; j < k; ++j) {
      const int64_t a = static_cast<int64_t>(n) * k + j;
      if (slot[a] < 0) {
        dgates[a] = S(0);
        continue;
      }
      const S* y = yp + static_cast<int64_t>(slot[a]) * C;
      S* dy = dyp + static_cast<int64_t>(slot[a]) * C;
      S dot = 0;
      for (int c = 0; c < C; ++c) {
        dot += d[c] * y[c];
        dy[c] = gates[a] * d[c];
      }
      dgates[a] = dot;
    }
  }
}

#define MB_INSTANTIATE(S)                                                                        \
  template void moe_topk_forward<S>(int32_t*, S*, S*, const S*, int, int, int, bool);            \
  template void moe_topk_backward<S>(S*, const S*, const S*, const S*, const S*, const int32_t*, \
                                     int, int, int);                                             \
  template void moe_plan<S>(int32_t*, int32_t*, S*, const int32_t*, const S*, int, int, int, int); \
  template void moe_permute_forward<S>(S*, const S*, const int32_t*, int, int, int);             \
  template void moe_permute_backward<S>(S*, const S*, const int32_t*, int, int, int);            \
  template void moe_unpermute_forward<S>(S*, const S*, const S*, const int32_t*, int, int, int); \
  template void moe_unpermute_backward<S>(S*, S*, const S*, const S*, const S*, const int32_t*,  \
                                          int, int, int);

MB_INSTANTIATE(float)
MB_INSTANTIATE(double)
#undef MB_INSTANTIATE

}  // namespace meshbench::parallel
