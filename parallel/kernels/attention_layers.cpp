// CPU attention kernels declared in layers.hpp: the materialised causal attention, context
// parallel's chunk attention with its log-sum-exp merge, and flash attention (issue 29).
// Instantiated for float (the engine) and double (gradient checks).
#include "kernels/layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <omp.h>

#include "compute/blas.hpp"
#include "kernels/fast_math.hpp"

namespace meshbench::parallel {

using compute::gemm;
using compute::Trans;
using fastmath::exp_;

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
          for (int i0 = j0 / Bq * Bq; i0 < T; i0 += Bq) {  // the query tiles that see this key tile
            const int r = std::min(Bq, T - i0);
            // the tile's keys up to its last row: on the diagonal the later keys are masked for
            // every row, so they are neither scored nor given gradients (as the forward)
            const int c = std::min({Bk, T - j0, i0 + r - j0});
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

#define MB_INSTANTIATE(S)                                                                     \
  template void attention_forward<S>(S*, S*, const S*, int, int, int, int, int);              \
  template void attention_backward<S>(S*, S*, const S*, const S*, const S*, int, int, int,    \
                                      int, int);                                              \
  template void attention_chunk_forward<S>(S*, int, S*, const S*, int, const S*, int, const S*, int, int,\
                                           int, int, int, int, int, int, int, bool);          \
  template void attention_chunk_backward<S>(S*, int, S*, int, S*, int, const S*, int, const S*,\
                                            const S*, const S*, int, const S*, int, const S*, int,\
                                            int, int, int, int, int, int, int, int);          \
  template void attention_rowdot<S>(S*, const S*, int, const S*, int, int, int, int, int);    \
  template void flash_attention_forward<S>(S*, S*, const S*, int, int, int, int, int);        \
  template void flash_attention_backward<S>(S*, const S*, const S*, const S*, const S*, int, int, int, int, int);

MB_INSTANTIATE(float)
MB_INSTANTIATE(double)
#undef MB_INSTANTIATE

}  // namespace meshbench::parallel
