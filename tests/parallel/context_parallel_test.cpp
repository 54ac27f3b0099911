// Context parallel's chunk attention (issue 12) against the one-rank causal attention: the
// sequence cut into chunks, every (query chunk, key chunk) pair run with the log-sum-exp
// merge in any order, gives the same output; the chunk backward from the final lse gives the
// same dQ, dK, dV (float64, 1e-12 relative). Fully masked pairs change nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/layers.hpp"

using namespace meshbench::parallel;
using Vec = std::vector<double>;

namespace {
Vec random(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
double rel(const Vec& a, const Vec& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

// Chunk c of every sample of a (B, T, ld) array as its own (B, Tc, ld) array, and back.
Vec take(const Vec& x, int B, int T, int ld, int c, int Tc) {
  Vec out(size_t(B) * Tc * ld);
  for (int b = 0; b < B; ++b)
    std::copy_n(x.begin() + (long(b) * T + c * Tc) * ld, Tc * ld, out.begin() + long(b) * Tc * ld);
  return out;
}
void put(Vec& x, const Vec& part, int B, int T, int ld, int c, int Tc) {
  for (int b = 0; b < B; ++b)
    std::copy_n(part.begin() + long(b) * Tc * ld, Tc * ld, x.begin() + (long(b) * T + c * Tc) * ld);
}

struct Shape {
  int B = 2, T = 16, NH = 4, KVH = 2, hs = 8;
  int C() const { return NH * hs; }
  int QKV() const { return (NH + 2 * KVH) * hs; }
};
}  // namespace

TEST(ChunkAttention, MergedChunksEqualFullCausalAttention) {
  const Shape s;
  const Vec qkv = random(size_t(s.B) * s.T * s.QKV(), 1), dy = random(size_t(s.B) * s.T * s.C(), 2);
  Vec ref(size_t(s.B) * s.T * s.C()), att(size_t(s.B) * s.NH * s.T * s.T), dref(qkv.size()), datt(att.size());
  attention_forward(ref.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.KVH, s.hs);
  attention_backward(dref.data(), datt.data(), dy.data(), qkv.data(), att.data(), s.B, s.T, s.NH, s.KVH, s.hs);
  for (int chunks : {1, 2, 4}) {
    const int Tc = s.T / chunks, QKV = s.QKV(), C = s.C(), q_off = 0, k_off = s.NH * s.hs, v_off = (s.NH + s.KVH) * s.hs;
    Vec out(ref.size()), dqkv(qkv.size(), 0.0);
    std::vector<Vec> lse(static_cast<size_t>(chunks)), o(static_cast<size_t>(chunks));
    for (int a = 0; a < chunks; ++a) {
      const Vec qa = take(qkv, s.B, s.T, QKV, a, Tc);
      o[size_t(a)].assign(size_t(s.B) * Tc * C, 0.0);
      lse[size_t(a)].assign(size_t(s.B) * s.NH * Tc, 0.0);
      // Key chunks in reverse order (the merge must not depend on it); later chunks are masked.
      bool first = true;
      for (int k = chunks - 1; k >= 0; --k) {
        const Vec kc = take(qkv, s.B, s.T, QKV, k, Tc);
        attention_chunk_forward(o[size_t(a)].data(), C, lse[size_t(a)].data(), qa.data() + q_off, QKV,
                                kc.data() + k_off, QKV, kc.data() + v_off, QKV, s.B, Tc, Tc, s.NH, s.KVH, s.hs,
                                a * Tc, k * Tc, first);
        first = false;
      }
      put(out, o[size_t(a)], s.B, s.T, C, a, Tc);
    }
    EXPECT_LT(rel(out, ref), 1e-12) << chunks << " chunks";
    // The backward: D from the output, then every pair; dK, dV accumulate in the full array.
    for (int a = 0; a < chunks; ++a) {
      const Vec qa = take(qkv, s.B, s.T, QKV, a, Tc), dya = take(dy, s.B, s.T, C, a, Tc);
      Vec D(size_t(s.B) * s.NH * Tc), dqa(qa.size(), 0.0);
      attention_rowdot(D.data(), dya.data(), C, o[size_t(a)].data(), C, s.B, Tc, s.NH, s.hs);
      for (int k = 0; k < chunks; ++k) {
        const Vec kc = take(qkv, s.B, s.T, QKV, k, Tc);
        Vec dk = take(dqkv, s.B, s.T, QKV, k, Tc);
        attention_chunk_backward(dqa.data() + q_off, QKV, dk.data() + k_off, QKV, dk.data() + v_off, QKV, dya.data(),
                                 C, D.data(), lse[size_t(a)].data(), qa.data() + q_off, QKV, kc.data() + k_off, QKV,
                                 kc.data() + v_off, QKV, s.B, Tc, Tc, s.NH, s.KVH, s.hs, a * Tc, k * Tc);
        put(dqkv, dk, s.B, s.T, QKV, k, Tc);  // its K, V columns accumulated; Q columns untouched
      }
      Vec cur = take(dqkv, s.B, s.T, QKV, a, Tc);
      for (int b = 0; b < s.B; ++b)
        for (int i = 0; i < Tc; ++i)
          for (int d = 0; d < s.NH * s.hs; ++d)
            cur[(size_t(b) * Tc + i) * QKV + d] = dqa[(size_t(b) * Tc + i) * QKV + d];
      put(dqkv, cur, s.B, s.T, QKV, a, Tc);
    }
    EXPECT_LT(rel(dqkv, dref), 1e-12) << chunks << " chunks";
  }
}

TEST(ChunkAttention, FullyMaskedPairChangesNothing) {
  const Shape s;
  const int Tc = 4, QKV = s.QKV(), C = s.C();
  const Vec q = random(size_t(s.B) * Tc * QKV, 3), k = random(size_t(s.B) * Tc * QKV, 4);
  Vec o(size_t(s.B) * Tc * C, 0.0), lse(size_t(s.B) * s.NH * Tc);
  attention_chunk_forward(o.data(), C, lse.data(), q.data(), QKV, k.data() + s.NH * s.hs, QKV,
                          k.data() + (s.NH + s.KVH) * s.hs, QKV, s.B, Tc, Tc, s.NH, s.KVH, s.hs, 0, 0, true);
  const Vec o0 = o, l0 = lse;
  // Keys at positions 8..11 are all after queries 0..3.
  attention_chunk_forward(o.data(), C, lse.data(), q.data(), QKV, k.data() + s.NH * s.hs, QKV,
                          k.data() + (s.NH + s.KVH) * s.hs, QKV, s.B, Tc, Tc, s.NH, s.KVH, s.hs, 0, 8, false);
  EXPECT_EQ(o, o0);
  EXPECT_EQ(lse, l0);
}

// Padding in the last chunk of the sequence (any values there) changes no output of the
// earlier chunks and no gradient reaching them: the causal structure masks it out.
TEST(ChunkAttention, PaddingInTheLastChunkChangesNothingBefore) {
  const Shape s;
  const int chunks = 4, Tc = s.T / chunks, QKV = s.QKV(), C = s.C();
  Vec a = random(size_t(s.B) * s.T * QKV, 5), b = a;
  const Vec pad = random(size_t(s.B) * Tc * QKV, 6);
  put(b, pad, s.B, s.T, QKV, chunks - 1, Tc);  // b: other values in the last chunk
  const Vec dy = random(size_t(s.B) * s.T * C, 7);
  auto run = [&](const Vec& qkv, Vec& out, Vec& dqkv) {
    Vec att(size_t(s.B) * s.NH * s.T * s.T), datt(att.size());
    out.assign(size_t(s.B) * s.T * C, 0.0);
    dqkv.assign(qkv.size(), 0.0);
    attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.KVH, s.hs);
    Vec dmasked = dy;  // the padding's output gradient is zero (no loss on padding)
    put(dmasked, Vec(size_t(s.B) * Tc * C, 0.0), s.B, s.T, C, chunks - 1, Tc);
    attention_backward(dqkv.data(), datt.data(), dmasked.data(), qkv.data(), att.data(), s.B, s.T, s.NH, s.KVH, s.hs);
  };
  Vec oa, ob, da, db;
  run(a, oa, da);
  run(b, ob, db);
  for (int c = 0; c < chunks - 1; ++c) {
    EXPECT_EQ(take(oa, s.B, s.T, C, c, Tc), take(ob, s.B, s.T, C, c, Tc)) << "output of chunk " << c;
    EXPECT_EQ(take(da, s.B, s.T, QKV, c, Tc), take(db, s.B, s.T, QKV, c, Tc)) << "gradient of chunk " << c;
  }
}
