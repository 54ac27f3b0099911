// Backend parity (parity.hpp): the op list, the whole step, and the tolerance table.
#include "kernels/parity.hpp"

#include <cmath>
#include <map>
#include <functional>
#include <random>

#include "core/error.hpp"
#include "kernels/layers.hpp"
#include "kernels/moe_layers.hpp"

namespace meshbench::parallel {

double parity_tolerance(const std::string& op, Precision p) {
  struct Tol {
    double fp32, bf16;
  };
  // bf16 with a GEMM: about 3x the largest error of the bf16 emulation over seeds 1-8 (the
  // measured maximum in the comment; Emulation.Bf16TolerancesArePinned re-measures it).
  static const std::map<std::string, Tol> kTable = {
      {"matmul_forward", {1e-5, 5e-3}},                 // 1.56e-3
      {"matmul_forward.accumulate", {1e-5, 4e-3}},      // 1.20e-3
      {"matmul_backward.dinp", {1e-5, 8e-3}},           // 2.36e-3
      {"matmul_backward.dweight", {1e-5, 8e-3}},        // 2.38e-3
      {"matmul_backward.dbias", {1e-5, 1e-5}},
      {"attention_forward", {1e-5, 1e-2}},              // 3.03e-3
      {"attention_forward.att", {1e-5, 6e-3}},          // 1.98e-3
      {"attention_backward", {1e-4, 1.2e-2}},           // 3.55e-3
      {"attention_chunk_forward", {1e-5, 1e-2}},        // 3.61e-3
      {"attention_chunk_forward.lse", {1e-5, 7e-4}},    // 2.38e-4
      {"attention_chunk_backward.dq", {1e-4, 2.5e-3}},  // 8.61e-4
      {"attention_chunk_backward.dkv", {1e-4, 2.5e-3}}, // 7.52e-4
      // flash attention: fp32 arithmetic on every backend (no GEMM inputs rounded to bf16)
      {"flash_attention_forward", {1e-5, 1e-5}},
      {"flash_attention_forward.lse", {1e-5, 1e-5}},
      {"flash_attention_backward", {1e-4, 1e-4}},
      {"layernorm_forward", {1e-5, 1e-5}},
      {"layernorm_backward.dinp", {1e-5, 1e-5}},
      {"layernorm_backward.dweight", {1e-5, 1e-5}},
      {"layernorm_backward.dbias", {1e-5, 1e-5}},
      {"gelu_forward", {1e-5, 1e-5}},
      {"gelu_backward", {1e-5, 1e-5}},
      {"crossentropy_forward.loss", {1e-5, 1e-5}},
      {"crossentropy_forward.losses", {1e-5, 1e-5}},
      {"crossentropy_forward.probs", {1e-5, 1e-5}},
      {"crossentropy_backward", {1e-5, 1e-5}},
      {"adamw", {1e-5, 1e-5}},
      {"embedding_forward", {1e-5, 1e-5}},
      {"embedding_backward.dwte", {1e-5, 1e-5}},
      {"embedding_backward.dwpe", {1e-5, 1e-5}},
      {"copy", {0.0, 0.0}},
      {"moe_topk_forward.idx", {0.0, 0.0}},  // mismatched choices / all (exact)
      {"moe_topk_forward.probs", {1e-6, 1e-6}},
      {"moe_topk_forward.gates", {1e-6, 1e-6}},
      {"moe_topk_backward", {1e-5, 1e-5}},
      {"moe_plan.slot", {0.0, 0.0}},
      {"moe_plan.counts", {0.0, 0.0}},
      {"moe_plan.prob_sum", {1e-6, 1e-6}},
      {"moe_permute_forward", {0.0, 0.0}},
      {"moe_permute_backward", {1e-6, 1e-6}},
      {"moe_unpermute_forward", {1e-6, 1e-6}},
      {"moe_unpermute_backward.dyp", {1e-6, 1e-6}},
      {"moe_unpermute_backward.dgates", {1e-5, 1e-5}},
      {"scale", {1e-6, 1e-6}},
      // loss: 8.23e-6 over seeds 1-8; on gpu-check's own shapes and seeds (tiny seed 4, tiny
      // kv-heads 2 seed 1234: Emulation.Bf16ToleranceCoversTheGpuCheckShapes) 5.19e-6 and
      // 2.74e-6; 4e-5 leaves about 5x over the worst (it was 2.5e-5, 3x: thin, issue 30)
      {"loss", {1e-5, 4e-5}},
      {"logits", {1e-5, 1e-2}},                         // 3.14e-3
      {"grads", {1e-4, 1.2e-2}},                        // 3.98e-3
      {"updated_params", {1e-5, 1e-5}},
  };
  const auto it = kTable.find(op);
  if (it == kTable.end()) throw core::UsageError("parity: no tolerance for op " + op);
  return p == Precision::kFp32 ? it->second.fp32 : it->second.bf16;
}

double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

namespace {

std::vector<float> randn(size_t n, std::mt19937& g, float sd = 1.f) {
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Arrays in the backend's memory, filled from and read back to host vectors.
template <typename T>
BackendArray<T, float> put(Backend<float>& be, const std::vector<T>& h) {
  BackendArray<T, float> a(be, int64_t(h.size()));
  be.upload(a.data(), h.data(), a.bytes());
  return a;
}
template <typename T>
std::vector<T> get(Backend<float>& be, const BackendArray<T, float>& a) {
  std::vector<T> h(size_t(a.size()));
  be.download(h.data(), a.data(), a.bytes());
  return h;
}

}  // namespace

namespace {

// The shapes every check uses. T = 70: two CPU row blocks of attention; GQA with two query
// heads per KV head.
namespace shape {
constexpr int B = 2, T = 70, NH = 4, KVH = 2, hs = 16, C = NH * hs, QKV = (NH + 2 * KVH) * hs, N = B * T, OC = 96,
              V = 300;
}  // namespace shape

using RowFn = std::function<void(const std::string&, double)>;

// matmul: out = (and +=), dinp =, dweight +=, dbias += (from non-zero starting values)
void parity_matmul(Backend<float>& be, std::mt19937& g, const RowFn& row) {
  using namespace shape;
  auto x = randn(size_t(N) * C, g), w = randn(size_t(OC) * C, g, 0.1f), b = randn(OC, g),
       d = randn(size_t(N) * OC, g), out0 = randn(size_t(N) * OC, g),
       dx0 = randn(size_t(N) * C, g), dw0 = randn(size_t(OC) * C, g), db0 = randn(OC, g);
  auto X = put(be, x), W = put(be, w), Bb = put(be, b), D = put(be, d), O = put(be, out0),
       OA = put(be, out0), DX = put(be, dx0), DW = put(be, dw0), DB = put(be, db0);
  std::vector<float> out = out0, acc = out0, dx = dx0, dw = dw0, db = db0;
  matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC, false);
  matmul_forward(acc.data(), x.data(), w.data(), b.data(), N, C, OC, true);
  matmul_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), N, C, OC);
  be.matmul_forward(O.data(), X.data(), W.data(), Bb.data(), N, C, OC, false);
  be.matmul_forward(OA.data(), X.data(), W.data(), Bb.data(), N, C, OC, true);
  be.matmul_backward(DX.data(), DW.data(), DB.data(), D.data(), X.data(), W.data(), N, C, OC);
  row("matmul_forward", rel_error(get(be, O), out));
  row("matmul_forward.accumulate", rel_error(get(be, OA), acc));
  row("matmul_backward.dinp", rel_error(get(be, DX), dx));
  row("matmul_backward.dweight", rel_error(get(be, DW), dw));
  row("matmul_backward.dbias", rel_error(get(be, DB), db));
}

// attention (causal, GQA): out, the cached probabilities, and dqkv (written in full)
void parity_attention(Backend<float>& be, std::mt19937& g, const RowFn& row) {
  using namespace shape;
  auto qkv = randn(size_t(N) * QKV, g), d = randn(size_t(N) * C, g),
       junk = randn(size_t(N) * QKV, g);
  std::vector<float> out(size_t(N) * C), att(size_t(B) * NH * T * T), datt(att.size()),
      dqkv = junk;
  attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, hs);
  attention_backward(dqkv.data(), datt.data(), d.data(), qkv.data(), att.data(), B, T, NH, KVH, hs);
  auto Q = put(be, qkv), D = put(be, d), DQ = put(be, junk);
  BackendArray<float, float> O(be, int64_t(out.size())), A(be, int64_t(att.size())),
      DA(be, int64_t(att.size()));
  be.attention_forward(O.data(), A.data(), Q.data(), B, T, NH, KVH, hs);
  be.attention_backward(DQ.data(), DA.data(), D.data(), Q.data(), A.data(), B, T, NH, KVH, hs);
  row("attention_forward", rel_error(get(be, O), out));
  row("attention_forward.att", rel_error(get(be, A), att));
  row("attention_backward", rel_error(get(be, DQ), dqkv));
}

// flash attention (causal, GQA; T = 70: a partial query tile and key tile on every backend):
// out, the row log-sum-exp, and dqkv (written in full) against the CPU's flash kernels
void parity_flash_attention(Backend<float>& be, std::mt19937& g, const RowFn& row) {
  using namespace shape;
  if (!be.flash_attention()) return;
  auto qkv = randn(size_t(N) * QKV, g), d = randn(size_t(N) * C, g), junk = randn(size_t(N) * QKV, g);
  std::vector<float> out(size_t(N) * C), lse(size_t(B) * NH * T), dqkv = junk;
  flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH, KVH, hs);
  flash_attention_backward(dqkv.data(), d.data(), qkv.data(), out.data(), lse.data(), B, T, NH, KVH, hs);
  auto Q = put(be, qkv), D = put(be, d), DQ = put(be, junk);
  BackendArray<float, float> O(be, int64_t(out.size())), L(be, int64_t(lse.size()));
  be.flash_attention_forward(O.data(), L.data(), Q.data(), B, T, NH, KVH, hs);
  be.flash_attention_backward(DQ.data(), D.data(), Q.data(), O.data(), L.data(), B, T, NH, KVH, hs);
  row("flash_attention_forward", rel_error(get(be, O), out));
  row("flash_attention_forward.lse", rel_error(get(be, L), lse));
  row("flash_attention_backward", rel_error(get(be, DQ), dqkv));
}

// context-parallel chunk attention (GQA): the second half of a sequence (rows T/2..T-1) against
// both halves' keys, as two pairs merged by log-sum-exp (a fully visible pair first, then the
// causal diagonal), and the backward of both pairs accumulating into dq, dk, dv from non-zero
// starting values; every array a strided view of packed qkv rows (as the model passes them)
void parity_chunk_attention(Backend<float>& be, std::mt19937& g, const RowFn& row) {
  using namespace shape;
  const int Tc = T / 2, Nc = B * Tc, kOff = NH * hs, vOff = (NH + KVH) * hs;
  auto q = randn(size_t(Nc) * QKV, g), kv0 = randn(size_t(Nc) * QKV, g), kv1 = randn(size_t(Nc) * QKV, g),
       dy = randn(size_t(Nc) * C, g), dq0 = randn(size_t(Nc) * QKV, g), dkv00 = randn(size_t(Nc) * QKV, g),
       dkv10 = randn(size_t(Nc) * QKV, g);
  std::vector<float> o(size_t(Nc) * C), lse(size_t(B) * NH * Tc), D(lse.size()), dq = dq0, dkv0 = dkv00, dkv1 = dkv10;
  const std::vector<float>* kv[2] = {&kv0, &kv1};
  std::vector<float>* dkv[2] = {&dkv0, &dkv1};
  for (int j = 0; j < 2; ++j)
    attention_chunk_forward(o.data(), C, lse.data(), q.data(), QKV, kv[j]->data() + kOff, QKV, kv[j]->data() + vOff, QKV,
                            B, Tc, Tc, NH, KVH, hs, Tc, j * Tc, j == 0);
  attention_rowdot(D.data(), dy.data(), C, o.data(), C, B, Tc, NH, hs);
  for (int j = 0; j < 2; ++j)
    attention_chunk_backward(dq.data(), QKV, dkv[j]->data() + kOff, QKV, dkv[j]->data() + vOff, QKV, dy.data(), C,
                             D.data(), lse.data(), q.data(), QKV, kv[j]->data() + kOff, QKV, kv[j]->data() + vOff, QKV,
                             B, Tc, Tc, NH, KVH, hs, Tc, j * Tc);
  auto Q = put(be, q), K0 = put(be, kv0), K1 = put(be, kv1), DY = put(be, dy), DQ = put(be, dq0), DK0 = put(be, dkv00),
       DK1 = put(be, dkv10), Dd = put(be, D);
  BackendArray<float, float> O(be, int64_t(o.size())), L(be, int64_t(lse.size()));
  const BackendArray<float, float>* KV[2] = {&K0, &K1};
  BackendArray<float, float>* DKV[2] = {&DK0, &DK1};
  for (int j = 0; j < 2; ++j)
    be.attention_chunk_forward(O.data(), C, L.data(), Q.data(), QKV, KV[j]->data() + kOff, QKV, KV[j]->data() + vOff,
                               QKV, B, Tc, Tc, NH, KVH, hs, Tc, j * Tc, j == 0);
  row("attention_chunk_forward", rel_error(get(be, O), o));
  row("attention_chunk_forward.lse", rel_error(get(be, L), lse));
  // the backward from the reference's D and lse: each side's own chunk gradients, not the forward's drift
  auto LR = put(be, lse);
  for (int j = 0; j < 2; ++j)
    be.attention_chunk_backward(DQ.data(), QKV, DKV[j]->data() + kOff, QKV, DKV[j]->data() + vOff, QKV, DY.data(), C,
                                Dd.data(), LR.data(), Q.data(), QKV, KV[j]->data() + kOff, QKV, KV[j]->data() + vOff,
                                QKV, B, Tc, Tc, NH, KVH, hs, Tc, j * Tc);
  row("attention_chunk_backward.dq", rel_error(get(be, DQ), dq));
  std::vector<float> got = get(be, DK0), want = dkv0, got1 = get(be, DK1);
  got.insert(got.end(), got1.begin(), got1.end());
  want.insert(want.end(), dkv1.begin(), dkv1.end());
  row("attention_chunk_backward.dkv", rel_error(got, want));
}

// layernorm: dinp, dweight, dbias accumulate
void parity_layernorm(Backend<float>& be, std::mt19937& g, const RowFn& row) {
  using namespace shape;
  auto x = randn(size_t(N) * C, g), w = randn(C, g), b = randn(C, g), d = randn(size_t(N) * C, g),
       dx0 = randn(size_t(N) * C, g), dw0 = randn(C, g), db0 = randn(C, g);
  std::vector<float> out(x.size()), mean(N), rstd(N), dx = dx0, dw = dw0, db = db0;
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  layernorm_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  auto X = put(be, x), W = put(be, w), Bb = put(be, b), D = put(be, d), DX = put(be, dx0),
       DW = put(be, dw0), DB = put(be, db0);
  BackendArray<float, float> O(be, int64_t(x.size())), M(be, N), R(be, N);
  be.layernorm_forward(O.data(), M.data(), R.data(), X.data(), W.data(), Bb.data(), N, C);
  be.layernorm_backward(DX.data(), DW.data(), DB.data(), D.data(), X.data(), W.data(), M.data(),
                        R.data(), N, C);
  row("layernorm_forward", rel_error(get(be, O), out));
  row("layernorm_backward.dinp", rel_error(get(be, DX), dx));
  row("layernorm_backward.dweight", rel_error(get(be, DW), dw));
  row("layernorm_backward.dbias", rel_error(get(be, DB), db));
}

// gelu; the backward in place (dinp aliases dout), as the model calls it
void parity_gelu(Backend<float>& be, std::mt19937& g, const RowFn& row) {
  using namespace shape;
  const size_t n = 5000;
  auto x = randn(n, g, 2.f), d = randn(n, g);
  std::vector<float> y(n), dx = d;
  gelu_forward(y.data(), x.data(), int64_t(n));
  gelu_backward(dx.data(), x.data(), dx.data(), int64_t(n));
  auto X = put(be, x), DX = put(be, d);
  BackendArray<float, float> Y(be, int64_t(n));
  be.gelu_forward(Y.data(), X.data(), int64_t(n));
  be.gelu_backward(DX.data(), X.data(), DX.data(), int64_t(n));
  row("gelu_forward", rel_error(get(be, Y), y));
  row("gelu_backward", rel_error(get(be, DX), dx));
}

// cross-entropy in place (probs alias logits, dlogits alias probs), loss scale 0.7
void parity_crossentropy(Backend<float>& be, std::mt19937& g, const RowFn& row) {
  using namespace shape;
  auto logits = randn(size_t(N) * V, g, 3.f);
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[size_t(i)] = (i * 37) % V;
  std::vector<float> probs = logits, losses(N);
  const float loss = crossentropy_forward(probs.data(), losses.data(), probs.data(), tgt.data(), N, V);
  auto L = put(be, logits);
  auto TG = put(be, tgt);
  BackendArray<float, float> LS(be, N);
  const float got = be.crossentropy_forward(L.data(), LS.data(), L.data(), TG.data(), N, V);
  row("crossentropy_forward.loss", std::abs(double(got) - loss) / std::abs(double(loss)));
  row("crossentropy_forward.losses", rel_error(get(be, LS), losses));
  row("crossentropy_forward.probs", rel_error(get(be, L), probs));
  crossentropy_backward(probs.data(), probs.data(), tgt.data(), 0.7f, N, V);
  be.crossentropy_backward(L.data(), L.data(), TG.data(), 0.7f, N, V);
  row("crossentropy_backward", rel_error(get(be, L), probs));
}

// AdamW, three steps with weight decay
void parity_adamw(Backend<float>& be, std::mt19937& g, const RowFn& row) {
  using namespace shape;
  const size_t n = 5000;
  auto prm = randn(n, g), gr = randn(n, g);
  std::vector<float> m(n, 0.f), v(n, 0.f);
  AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  auto P = put(be, prm), G = put(be, gr);
  BackendArray<float, float> M(be, int64_t(n)), Vv(be, int64_t(n));
  for (int t = 1; t <= 3; ++t) {
    adamw_update(prm.data(), gr.data(), m.data(), v.data(), int64_t(n), cfg, cfg.weight_decay, t);
    be.adamw_update(P.data(), G.data(), M.data(), Vv.data(), int64_t(n), cfg, cfg.weight_decay, t);
  }
  row("adamw", rel_error(get(be, P), prm));
}

// embedding, with repeated tokens (colliding dwte rows); grads accumulate
void parity_embedding(Backend<float>& be, std::mt19937& g, const RowFn& row) {
  using namespace shape;
  const int maxT = T + 3;
  auto wte = randn(size_t(V) * C, g), wpe = randn(size_t(maxT) * C, g), d = randn(size_t(N) * C, g),
       dwte0 = randn(wte.size(), g), dwpe0 = randn(wpe.size(), g);
  std::vector<int32_t> tok(N);
  for (int i = 0; i < N; ++i) tok[size_t(i)] = (i * 7) % 50;
  std::vector<float> out(size_t(N) * C), dwte = dwte0, dwpe = dwpe0;
  embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  embedding_backward(dwte.data(), dwpe.data(), d.data(), tok.data(), B, T, C);
  auto E = put(be, wte), Pp = put(be, wpe), D = put(be, d), DE = put(be, dwte0), DP = put(be, dwpe0);
  auto TK = put(be, tok);
  BackendArray<float, float> O(be, int64_t(out.size()));
  be.embedding_forward(O.data(), TK.data(), E.data(), Pp.data(), B, T, C);
  be.embedding_backward(DE.data(), DP.data(), D.data(), TK.data(), B, T, C);
  row("embedding_forward", rel_error(get(be, O), out));
  row("embedding_backward.dwte", rel_error(get(be, DE), dwte));
  row("embedding_backward.dwpe", rel_error(get(be, DP), dwpe));
}

// MoE routing (moe_layers.hpp): 8 experts, top-2, capacity 30 of the 35 rows per expert on average, so some are dropped; the plan and permutes take the reference's routing
void parity_moe_routing(Backend<float>& be, std::mt19937& g, const RowFn& row) {
  using namespace shape;
  const int E = 8, k = 2, cap = 30;
  auto z = randn(size_t(N) * E, g, 2.f), dg = randn(size_t(N) * k, g), dp = randn(E, g),
       x = randn(size_t(N) * C, g), dout = randn(size_t(N) * C, g), base = randn(size_t(N) * C, g);
  std::vector<int32_t> idx(size_t(N) * k), slot(idx.size()), counts(2 * E + 1);
  std::vector<float> probs(z.size()), gates(idx.size()), dz(z.size()), psum(E);
  moe_topk_forward(idx.data(), gates.data(), probs.data(), z.data(), N, E, k, false);
  moe_topk_backward(dz.data(), dg.data(), dp.data(), probs.data(), gates.data(), idx.data(), N, E, k);
  moe_plan(slot.data(), counts.data(), psum.data(), idx.data(), probs.data(), N, E, k, cap);
  const int R = counts[2 * E];
  auto yp = randn(size_t(R) * C, g), dxp = randn(size_t(R) * C, g);
  std::vector<float> xp(size_t(R) * C), dx(x.size()), out = base, dyp(size_t(R) * C), dgt(idx.size());
  moe_permute_forward(xp.data(), x.data(), slot.data(), N, C, k);
  moe_permute_backward(dx.data(), dxp.data(), slot.data(), N, C, k);
  moe_unpermute_forward(out.data(), yp.data(), gates.data(), slot.data(), N, C, k);
  moe_unpermute_backward(dyp.data(), dgt.data(), dout.data(), yp.data(), gates.data(), slot.data(), N, C, k);
  auto Z = put(be, z), DG = put(be, dg), DP = put(be, dp), X = put(be, x), DO = put(be, dout),
       OUT = put(be, base), YP = put(be, yp), DXP = put(be, dxp), P = put(be, probs), G = put(be, gates);
  auto ID = put(be, idx);
  BackendArray<int32_t, float> I(be, int64_t(idx.size())), SL(be, int64_t(idx.size())), CN(be, 2 * E + 1);
  BackendArray<float, float> PR(be, int64_t(z.size())), GT(be, int64_t(idx.size())), DZ(be, int64_t(z.size())),
      PS(be, E), XP(be, int64_t(xp.size())), DX(be, int64_t(dx.size())), DYP(be, int64_t(dyp.size())),
      DGT(be, int64_t(idx.size()));
  be.moe_topk_forward(I.data(), GT.data(), PR.data(), Z.data(), N, E, k, false);
  be.moe_topk_backward(DZ.data(), DG.data(), DP.data(), P.data(), G.data(), ID.data(), N, E, k);
  be.moe_plan(SL.data(), CN.data(), PS.data(), ID.data(), P.data(), N, E, k, cap);
  auto S = put(be, slot);
  be.moe_permute_forward(XP.data(), X.data(), S.data(), N, C, k);
  be.moe_permute_backward(DX.data(), DXP.data(), S.data(), N, C, k);
  be.moe_unpermute_forward(OUT.data(), YP.data(), G.data(), S.data(), N, C, k);
  be.moe_unpermute_backward(DYP.data(), DGT.data(), DO.data(), YP.data(), G.data(), S.data(), N, C, k);
  auto mismatch = [](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i] ? 1 : 0;
    return double(n) / double(a.size());
  };
  row("moe_topk_forward.idx", mismatch(get(be, I), idx));
  row("moe_topk_forward.probs", rel_error(get(be, PR), probs));
  row("moe_topk_forward.gates", rel_error(get(be, GT), gates));
  row("moe_topk_backward", rel_error(get(be, DZ), dz));
  row("moe_plan.slot", mismatch(get(be, SL), slot));
  row("moe_plan.counts", mismatch(get(be, CN), counts));
  row("moe_plan.prob_sum", rel_error(get(be, PS), psum));
  row("moe_permute_forward", rel_error(get(be, XP), xp));
  row("moe_permute_backward", rel_error(get(be, DX), dx));
  row("moe_unpermute_forward", rel_error(get(be, OUT), out));
  row("moe_unpermute_backward.dyp", rel_error(get(be, DYP), dyp));
  row("moe_unpermute_backward.dgates", rel_error(get(be, DGT), dgt));
}

// copy and scale
void parity_copy_scale(Backend<float>& be, std::mt19937& g, const RowFn& row) {
  using namespace shape;
  const size_t n = 1001;
  auto x = randn(n, g);
  auto X = put(be, x);
  BackendArray<float, float> Y(be, int64_t(n));
  be.copy(Y.data(), X.data(), int64_t(n));
  row("copy", rel_error(get(be, Y), x));
  be.scale(Y.data(), 0.37, int64_t(n));
  std::vector<float> s = x;
  for (float& e : s) e *= 0.37f;
  row("scale", rel_error(get(be, Y), s));
}

}  // namespace

std::vector<ParityRow> layer_parity(Backend<float>& be, Precision p, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<ParityRow> rows;
  const RowFn row = [&](const std::string& op, double err) { rows.push_back({op, err, parity_tolerance(op, p)}); };
  parity_matmul(be, g, row);
  parity_attention(be, g, row);
  parity_flash_attention(be, g, row);
  parity_chunk_attention(be, g, row);
  parity_layernorm(be, g, row);
  parity_gelu(be, g, row);
  parity_crossentropy(be, g, row);
  parity_adamw(be, g, row);
  parity_embedding(be, g, row);
  parity_moe_routing(be, g, row);
  parity_copy_scale(be, g, row);
  be.synchronize();
  return rows;
}

}  // namespace meshbench::parallel
