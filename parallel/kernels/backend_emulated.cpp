// The device backends' GEMM plans executed on the host (backend_emulated.hpp).
#include "kernels/backend_emulated.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "compute/blas.hpp"
#include "kernels/backend_forwarding.hpp"
#include "kernels/flash_tile.hpp"
#include "kernels/moe_plan_blocks.hpp"
#include "kernels/operands.hpp"

namespace meshbench::parallel {
namespace {

using compute::Trans;

// The CUDA flash kernels (cuda/backend_cuda.cu k_flash_fwd, k_flash_rowdot, k_flash_dkdv,
// k_flash_dq) block by block: a block's rows one after another (its threads), the other side's
// tile copied as the kernel stages it in shared memory, each row through flash_tile.hpp's step.
// q, k, v in the fused qkv layout (B, T, QKV); out, dout (B, T, NH hs); lse, D (B, NH, T).
struct FlashShape {
  int B, T, NH, KVH, hs;
  int QKV() const { return (NH + 2 * KVH) * hs; }
  int C() const { return NH * hs; }
  const float* q(const float* qkv, int b, int h, int i) const { return qkv + (int64_t(b) * T + i) * QKV() + h * hs; }
  const float* k(const float* qkv, int b, int g, int j) const {
    return qkv + (int64_t(b) * T + j) * QKV() + (NH + g) * hs;
  }
  const float* v(const float* qkv, int b, int g, int j) const {
    return qkv + (int64_t(b) * T + j) * QKV() + (NH + KVH + g) * hs;
  }
};

void stage_rows(std::vector<float>& dst, int rows, int hs, const std::function<const float*(int)>& row) {
  dst.resize(size_t(rows) * size_t(hs));
  for (int t = 0; t < rows; ++t) std::memcpy(dst.data() + size_t(t) * hs, row(t), sizeof(float) * size_t(hs));
}

void emulated_flash_forward(float* out, float* lse, const float* qkv, const FlashShape& s) {
  using namespace flash;
  const float scale = 1.f / std::sqrt(float(s.hs));
  std::vector<float> Ks, Vs, acc(size_t(kRows) * s.hs), m(kRows), l(kRows);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const int g = h / (s.NH / s.KVH);
      for (int i0 = 0; i0 < s.T; i0 += kRows) {  // one block
        const int r = std::min(kRows, s.T - i0);
        std::fill(acc.begin(), acc.end(), 0.f);
        std::fill(m.begin(), m.end(), -INFINITY);
        std::fill(l.begin(), l.end(), 0.f);
        for (int j0 = 0; j0 < i0 + r; j0 += kTile) {
          const int c = std::min(kTile, s.T - j0);
          stage_rows(Ks, c, s.hs, [&](int t) { return s.k(qkv, b, g, j0 + t); });
          stage_rows(Vs, c, s.hs, [&](int t) { return s.v(qkv, b, g, j0 + t); });
          for (int t = 0; t < r; ++t)
            forward_row(s.q(qkv, b, h, i0 + t), Ks.data(), Vs.data(), c, j0, i0 + t, s.hs, scale, m[size_t(t)],
                        l[size_t(t)], acc.data() + size_t(t) * s.hs);
        }
        for (int t = 0; t < r; ++t) {
          float* o = out + (int64_t(b) * s.T + i0 + t) * s.C() + h * s.hs;
          for (int d = 0; d < s.hs; ++d) o[d] = acc[size_t(t) * s.hs + d] / l[size_t(t)];
          lse[(int64_t(b) * s.NH + h) * s.T + i0 + t] = m[size_t(t)] + std::log(l[size_t(t)]);
        }
      }
    }
}

void emulated_flash_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             const FlashShape& s) {
  using namespace flash;
  const float scale = 1.f / std::sqrt(float(s.hs));
  const int group = s.NH / s.KVH, C = s.C(), QKV = s.QKV();
  std::vector<float> D(size_t(s.B) * s.NH * s.T);
  for (int b = 0; b < s.B; ++b)  // k_flash_rowdot: D = rowsum(dO * O), a thread per (b, h, i)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < s.T; ++i) {
        const int64_t at = (int64_t(b) * s.T + i) * C + h * s.hs;
        D[(size_t(b) * s.NH + h) * s.T + i] = dot(dout + at, out + at, s.hs);
      }
  std::vector<float> Qs, dOs, Ls(kTile), Ds(kTile), acc(size_t(kRows) * 2 * s.hs);
  for (int b = 0; b < s.B; ++b)  // k_flash_dkdv: a block per (key tile, kv head), a thread per key row
    for (int g = 0; g < s.KVH; ++g)
      for (int j0 = 0; j0 < s.T; j0 += kRows) {
        const int r = std::min(kRows, s.T - j0);
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int h = g * group; h < (g + 1) * group; ++h)
          for (int i0 = j0 / kTile * kTile; i0 < s.T; i0 += kTile) {
            const int c = std::min(kTile, s.T - i0);
            stage_rows(Qs, c, s.hs, [&](int t) { return s.q(qkv, b, h, i0 + t); });
            stage_rows(dOs, c, s.hs, [&](int t) { return dout + (int64_t(b) * s.T + i0 + t) * C + h * s.hs; });
            for (int t = 0; t < c; ++t) {
              Ls[size_t(t)] = lse[(int64_t(b) * s.NH + h) * s.T + i0 + t];
              Ds[size_t(t)] = D[(size_t(b) * s.NH + h) * s.T + i0 + t];
            }
            for (int t = 0; t < r; ++t) {
              float* a = acc.data() + size_t(t) * 2 * s.hs;
              dkdv_row(s.k(qkv, b, g, j0 + t), s.v(qkv, b, g, j0 + t), j0 + t, Qs.data(), dOs.data(), Ls.data(),
                       Ds.data(), c, i0, s.hs, scale, a, a + s.hs);
            }
          }
        for (int t = 0; t < r; ++t) {
          float* row = dqkv + (int64_t(b) * s.T + j0 + t) * QKV;
          const float* a = acc.data() + size_t(t) * 2 * s.hs;
          std::memcpy(row + (s.NH + g) * s.hs, a, sizeof(float) * size_t(s.hs));
          std::memcpy(row + (s.NH + s.KVH + g) * s.hs, a + s.hs, sizeof(float) * size_t(s.hs));
        }
      }
  std::vector<float> Ks, Vs;
  for (int b = 0; b < s.B; ++b)  // k_flash_dq: a block per (query tile, head), a thread per query row
    for (int h = 0; h < s.NH; ++h) {
      const int g = h / group;
      for (int i0 = 0; i0 < s.T; i0 += kRows) {
        const int r = std::min(kRows, s.T - i0);
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int j0 = 0; j0 < i0 + r; j0 += kTile) {
          const int c = std::min(kTile, s.T - j0);
          stage_rows(Ks, c, s.hs, [&](int t) { return s.k(qkv, b, g, j0 + t); });
          stage_rows(Vs, c, s.hs, [&](int t) { return s.v(qkv, b, g, j0 + t); });
          for (int t = 0; t < r; ++t) {
            const int i = i0 + t;
            dq_row(s.q(qkv, b, h, i), dout + (int64_t(b) * s.T + i) * C + h * s.hs, lse[(int64_t(b) * s.NH + h) * s.T + i],
                   D[(size_t(b) * s.NH + h) * s.T + i], i, Ks.data(), Vs.data(), c, j0, s.hs, scale,
                   acc.data() + size_t(t) * s.hs);
          }
        }
        for (int t = 0; t < r; ++t)
          std::memcpy(dqkv + (int64_t(b) * s.T + i0 + t) * QKV + h * s.hs, acc.data() + size_t(t) * s.hs,
                      sizeof(float) * size_t(s.hs));
      }
    }
}

// The CUDA dispatch plan (cuda/moe_kernels.cuh k_moe_plan_*) launch by launch, block by block,
// each thread's step from moe_plan_blocks.hpp; hist zeroed first, as the backend does.
void emulated_moe_plan(int32_t* slot, int32_t* counts, float* prob_sum, const int32_t* idx, const float* probs, int N,
                       int E, int k, int capacity) {
  namespace mpb = moe_plan_blocks;
  const mpb::Plan g = mpb::plan(N, E, k);
  std::vector<int32_t> scratch(size_t(std::max<int64_t>(1, g.scratch_ints())), 0);
  int32_t* hist = scratch.data();
  int32_t* base = hist + g.chunks * E;
  std::vector<int32_t> ids(mpb::kChunk);
  for (int64_t c = 0; c < g.ranks.blocks; ++c) {  // 1: per chunk, its ids staged as in shared memory
    const int64_t a0 = c * mpb::kChunk;
    const int n = int(std::min<int64_t>(mpb::kChunk, g.assignments - a0));
    for (int i = 0; i < n; ++i) ids[size_t(i)] = idx[a0 + i];
    for (int i = 0; i < n; ++i) mpb::rank_in_chunk(slot, hist, ids.data(), n, i, a0 + i, c, E);
  }
  for (int e = 0; e < g.per_expert.blocks * g.per_expert.threads; ++e)  // 2
    if (e < E) mpb::scan_expert(base, counts, prob_sum, hist, probs, g.chunks, N, E, e);
  std::vector<int32_t> part(mpb::kScanThreads);  // 3: the run totals, their inclusive scan, the offsets
  for (int t = 0; t < mpb::kScanThreads; ++t) part[size_t(t)] = mpb::run_total(counts, E, capacity, t);
  for (int t = 1; t < mpb::kScanThreads; ++t) part[size_t(t)] += part[size_t(t) - 1];
  for (int t = 0; t < mpb::kScanThreads; ++t)
    mpb::run_offsets(counts + E, counts, E, capacity, t, t > 0 ? part[size_t(t) - 1] : 0, part.back());
  for (int64_t a = 0; a < g.assignments; ++a) mpb::place(slot, idx, base, counts + E, a, a / mpb::kChunk, E);  // 4
}

// The ops it does not round (memory, the elementwise ops, the loss, AdamW, the MoE routing)
// are the CPU backend's, through ForwardingBackend.
class EmulatedBackend final : public ForwardingBackend<float> {
 public:
  explicit EmulatedBackend(Precision p) : ForwardingBackend<float>(cpu_backend<float>()), p_(p), cpu_(inner_) {}

  std::string name() const override { return std::string("cpu-emulated ") + precision_name(p_); }
  // --attention flash: the CUDA kernels' blocks and rows (flash_tile.hpp), fp32 on both precisions
  bool flash_attention() const override { return true; }
  void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH, int KVH,
                               int hs) override {
    emulated_flash_forward(out, lse, qkv, FlashShape{B, T, NH, KVH, hs});
  }
  void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                                int B, int T, int NH, int KVH, int hs) override {
    emulated_flash_backward(dqkv, dout, qkv, out, lse, FlashShape{B, T, NH, KVH, hs});
  }
  compute::MemKind mem() const override { return compute::MemKind::kHost; }
  // The CUDA backend's chunk attention (operands.hpp chunk_batches and kernels.cuh's k_chunk_*),
  // batch by batch and row by row.
  void attention_chunk_forward(float* o, int ldo, float* lse, const float* q, int ldq, const float* k, int ldk, const float* v,
                               int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0,
                               bool first) override {
    const ChunkShape s{B, Tq, Tk, NH, KVH, hs, ldq, ldk, ldv, ldo, 0, 0, 0, 0};
    const int64_t rows = int64_t(B) * NH * Tq;
    std::vector<float> S(static_cast<size_t>(numel(s, Array::kS))), op(static_cast<size_t>(numel(s, Array::kOpair))),
        m(static_cast<size_t>(rows)), l(static_cast<size_t>(rows));
    const std::vector<float> Q = staged(q, numel(s, Array::kQ)), K = staged(k, numel(s, Array::kK)),
                             V = staged(v, numel(s, Array::kV));
    for (const GemmBatch& g : chunk_batches(s, false, 0))
      for (int i = 0; i < g.count; ++i) run(batch_entry(g, i), Q.data(), K.data(), S.data());
    for (int64_t r = 0; r < rows; ++r) {  // k_chunk_softmax
      float* p = S.data() + r * Tk;
      const int vis = chunk_visible(int(r % Tq), Tk, q0, k0);
      float mx = -INFINITY, sum = 0.f;
      for (int j = 0; j < vis; ++j) mx = std::max(mx, p[j]);
      for (int j = 0; j < vis; ++j) sum += std::exp(p[j] - mx);
      for (int j = 0; j < Tk; ++j) p[j] = j < vis ? std::exp(p[j] - mx) : 0.f;
      m[size_t(r)] = mx;
      l[size_t(r)] = sum;
    }
    const std::vector<float> P = staged(S.data(), int64_t(S.size()));
    for (const GemmBatch& g : chunk_batches(s, false, 1))
      for (int i = 0; i < g.count; ++i) run(batch_entry(g, i), P.data(), V.data(), op.data());
    for (int64_t r = 0; r < rows; ++r) {  // k_chunk_merge, then k_chunk_lse
      const int i = int(r % Tq), bh = int(r / Tq), b = bh / NH, h = bh % NH, vis = chunk_visible(i, Tk, q0, k0);
      float* out = o + (int64_t(b) * Tq + i) * ldo + int64_t(h) * hs;
      const float* acc = op.data() + (int64_t(b) * Tq + i) * NH * hs + int64_t(h) * hs;
      const float c = vis > 0 ? m[size_t(r)] + std::log(l[size_t(r)]) : -INFINITY, lr = l[size_t(r)];
      if (first) {
        for (int d = 0; d < hs; ++d) out[d] = vis > 0 ? acc[d] / lr : 0.f;
        lse[r] = c;
        continue;
      }
      if (vis <= 0) continue;
      const float old = lse[r], mx = std::max(old, c), wo = old == -INFINITY ? 0.f : std::exp(old - mx),
                  wc = std::exp(c - mx);
      for (int d = 0; d < hs; ++d) out[d] = (out[d] * wo + acc[d] / lr * wc) / (wo + wc);
      lse[r] = mx + std::log(wo + wc);
    }
  }
  void attention_chunk_backward(float* dq, int lddq, float* dk, int lddk, float* dv, int lddv, const float* dout, int lddo,
                                const float* D, const float* lse, const float* q, int ldq, const float* k, int ldk, const float* v,
                                int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0) override {
    const ChunkShape s{B, Tq, Tk, NH, KVH, hs, ldq, ldk, ldv, 0, lddo, lddq, lddk, lddv};
    const int64_t rows = int64_t(B) * NH * Tq;
    std::vector<float> S(static_cast<size_t>(numel(s, Array::kS))), ds(S.size());
    const std::vector<float> Q = staged(q, numel(s, Array::kQ)), K = staged(k, numel(s, Array::kK)),
                             V = staged(v, numel(s, Array::kV)), dY = staged(dout, numel(s, Array::kDout));
    for (const GemmBatch& g : chunk_batches(s, true, 0))
      for (int i = 0; i < g.count; ++i) run(batch_entry(g, i), Q.data(), K.data(), S.data());
    for (int64_t r = 0; r < rows; ++r) {  // k_chunk_probs
      float* p = S.data() + r * Tk;
      const int vis = chunk_visible(int(r % Tq), Tk, q0, k0);
      for (int j = 0; j < Tk; ++j) p[j] = j < vis ? std::exp(p[j] - lse[r]) : 0.f;
    }
    const std::vector<float> P = staged(S.data(), int64_t(S.size()));
    for (const GemmBatch& g : chunk_batches(s, true, 1))
      for (int i = 0; i < g.count; ++i) run(batch_entry(g, i), P.data(), dY.data(), dv);
    for (const GemmBatch& g : chunk_batches(s, true, 2))
      for (int i = 0; i < g.count; ++i) run(batch_entry(g, i), dY.data(), V.data(), ds.data());
    const float scale = 1.f / std::sqrt(float(hs));
    for (int64_t r = 0; r < rows; ++r)  // k_chunk_dscore
      for (int j = 0; j < Tk; ++j) ds[size_t(r * Tk + j)] = scale * S[size_t(r * Tk + j)] * (ds[size_t(r * Tk + j)] - D[r]);
    const std::vector<float> dS = staged(ds.data(), int64_t(ds.size()));
    const auto b3 = chunk_batches(s, true, 3), b4 = chunk_batches(s, true, 4);
    for (size_t n = 0; n < b3.size(); ++n) {
      for (int i = 0; i < b3[n].count; ++i) run(batch_entry(b3[n], i), dS.data(), K.data(), dq);
      for (int i = 0; i < b4[n].count; ++i) run(batch_entry(b4[n], i), dS.data(), Q.data(), dk);
    }
  }
  void moe_plan(int32_t* slot, int32_t* counts, float* prob_sum, const int32_t* idx,
                const float* probs, int N, int E, int k, int capacity) override {
    emulated_moe_plan(slot, counts, prob_sum, idx, probs, N, E, k, capacity);
  }

  // As CudaBackend::matmul_forward: bias rows first, then the plan with beta 1.
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int C, int OC, bool accumulate) override {
    for (int64_t n = 0; n < N; ++n)
      for (int j = 0; j < OC; ++j) out[n * OC + j] = (accumulate ? out[n * OC + j] : 0.f) + (bias ? bias[j] : 0.f);
    const MatmulShape s{N, C, OC};
    const std::vector<float> x = staged(inp, numel(s, Array::kInp)), w = staged(weight, numel(s, Array::kWeight));
    run(matmul_forward_gemm(s), x.data(), w.data(), out);
  }
  // The bias gradient reads the fp32 dout, as the CUDA kernel does.
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int C, int OC) override {
    const MatmulShape s{N, C, OC};
    const std::vector<float> d = staged(dout, numel(s, Array::kDout));
    const auto g = matmul_backward_gemms(s);
    if (dinp != nullptr) run(g[0], d.data(), staged(weight, numel(s, Array::kWeight)).data(), dinp);
    if (dweight != nullptr) run(g[1], d.data(), staged(inp, numel(s, Array::kInp)).data(), dweight);
    if (dbias == nullptr) return;
    for (int j = 0; j < OC; ++j) {
      float acc = 0.f;
      for (int64_t n = 0; n < N; ++n) acc += dout[n * OC + j];
      dbias[j] += acc;
    }
  }

  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int KVH,
                         int hs) override {
    const AttentionShape s{B, T, NH, KVH, hs};
    const std::vector<float> q = staged(qkv, numel(s, Array::kQkv));
    // the CUDA backend's strided batches (operands.hpp), entry by entry in batch order
    for (const GemmBatch& g : attention_batches(s, false, 0))
      for (int i = 0; i < g.count; ++i) run(batch_entry(g, i), q.data(), q.data(), att);
    for (int64_t r = 0; r < int64_t(B) * NH * T; ++r) {  // k_causal_softmax
      float* p = att + r * T;
      const int t = int(r % T);
      float mx = -INFINITY, sum = 0.f;
      for (int j = 0; j <= t; ++j) mx = std::max(mx, p[j]);
      for (int j = 0; j <= t; ++j) sum += std::exp(p[j] - mx);
      for (int j = 0; j < T; ++j) p[j] = j <= t ? std::exp(p[j] - mx) / sum : 0.f;
    }
    const std::vector<float> a = staged(att, numel(s, Array::kAtt));
    for (const GemmBatch& g : attention_batches(s, false, 1))
      for (int i = 0; i < g.count; ++i) run(batch_entry(g, i), a.data(), q.data(), out);
  }
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int NH, int KVH, int hs) override {
    const AttentionShape s{B, T, NH, KVH, hs};
    std::memset(dqkv, 0, sizeof(float) * static_cast<size_t>(numel(s, Array::kDqkv)));
    const std::vector<float> dy = staged(dout, numel(s, Array::kDout)), q = staged(qkv, numel(s, Array::kQkv));
    for (const GemmBatch& g : attention_batches(s, true, 0))
      for (int i = 0; i < g.count; ++i) run(batch_entry(g, i), dy.data(), q.data(), datt);
    for (int64_t r = 0; r < int64_t(B) * NH * T; ++r) {  // k_softmax_bwd
      const float* p = att + r * T;
      float* d = datt + r * T;
      const int t = int(r % T);
      float dot = 0.f;
      for (int j = 0; j <= t; ++j) dot += p[j] * d[j];
      for (int j = 0; j < T; ++j) d[j] = j <= t ? p[j] * (d[j] - dot) : 0.f;
    }
    const std::vector<float> ds = staged(datt, numel(s, Array::kDatt)), a = staged(att, numel(s, Array::kAtt));
    // the CUDA backend's order: per (b, j), the dQ, dK and dV batches over the KV groups
    const auto b1 = attention_batches(s, true, 1), b2 = attention_batches(s, true, 2), b3 = attention_batches(s, true, 3);
    for (size_t k = 0; k < b1.size(); ++k) {
      for (int i = 0; i < b1[k].count; ++i) run(batch_entry(b1[k], i), ds.data(), q.data(), dqkv);
      for (int i = 0; i < b2[k].count; ++i) run(batch_entry(b2[k], i), ds.data(), q.data(), dqkv);
      for (int i = 0; i < b3[k].count; ++i) run(batch_entry(b3[k], i), a.data(), dy.data(), dqkv);
    }
  }

 private:
  // A GEMM input as the device stages it: the whole array, rounded to bf16 in kBf16.
  std::vector<float> staged(const float* x, int64_t n) const {
    std::vector<float> r(x, x + n);
    if (p_ == Precision::kBf16)
      for (float& v : r) v = bf16_round(v);
    return r;
  }
  static void run(const GemmPlan& g, const float* A, const float* B, float* C) {
    compute::gemm<float>(g.ta ? Trans::kYes : Trans::kNo, g.tb ? Trans::kYes : Trans::kNo, g.M, g.N,
                         g.K, g.alpha, A + g.a.offset, g.a.ld, B + g.b.offset, g.b.ld, g.beta,
                         C + g.c.offset, g.c.ld);
  }

  Precision p_;
  Backend<float>& cpu_;
};

}  // namespace

Backend<float>& emulated_backend(Precision p) {
  static EmulatedBackend fp32(Precision::kFp32), bf16(Precision::kBf16);
  return p == Precision::kFp32 ? fp32 : bf16;
}

}  // namespace meshbench::parallel
