// Finite-difference gradient checks in float64 for every layer of the step engine
// (layers.hpp): loss = sum(out * R) for a fixed random R, so dout = R. Tolerance 1e-6.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "gradcheck.hpp"
#include "kernels/layers.hpp"

using namespace meshbench::parallel;
using meshbench::parallel::test::fd_check;
using meshbench::parallel::test::GradError;
using meshbench::parallel::test::dot;
using meshbench::parallel::test::expect_ok;
using meshbench::parallel::test::kTol;
using meshbench::parallel::test::randn;

namespace {


}  // namespace

TEST(LayerGrad, Embedding) {
  const int B = 2, T = 5, C = 6, V = 7, maxT = 8;
  std::vector<int32_t> tok{1, 3, 3, 0, 6, 2, 2, 5, 1, 3};
  auto wte = randn(V * C, 1), wpe = randn(maxT * C, 2), R = randn(B * T * C, 3);
  std::vector<double> out(B * T * C), dwte(V * C, 0), dwpe(maxT * C, 0);
  auto loss = [&] {
    embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, R);
  };
  embedding_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C);
  expect_ok(fd_check(loss, wte.data(), dwte.data(), V * C), "dwte");
  expect_ok(fd_check(loss, wpe.data(), dwpe.data(), maxT * C), "dwpe");
}

TEST(LayerGrad, LayerNorm) {
  const int N = 6, C = 9;
  auto inp = randn(N * C, 4), w = randn(C, 5), b = randn(C, 6), R = randn(N * C, 7);
  std::vector<double> out(N * C), mean(N), rstd(N), dinp(N * C, 0), dw(C, 0), db(C, 0);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return dot(out, R);
  };
  loss();
  layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  expect_ok(fd_check(loss, inp.data(), dinp.data(), N * C), "dinp");
  expect_ok(fd_check(loss, w.data(), dw.data(), C), "dweight");
  expect_ok(fd_check(loss, b.data(), db.data(), C), "dbias");
}

TEST(LayerGrad, Matmul) {
  const int N = 7, C = 5, OC = 70;  // OC > 64 covers two bias column blocks
  auto inp = randn(N * C, 8), w = randn(OC * C, 9), b = randn(OC, 10), R = randn(N * OC, 11);
  std::vector<double> out(N * OC), dinp(N * C, 0), dw(OC * C, 0), db(OC, 0);
  auto loss = [&] {
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return dot(out, R);
  };
  matmul_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), N, C, OC);
  expect_ok(fd_check(loss, inp.data(), dinp.data(), N * C), "dinp");
  expect_ok(fd_check(loss, w.data(), dw.data(), OC * C), "dweight");
  expect_ok(fd_check(loss, b.data(), db.data(), OC), "dbias");
}

TEST(LayerGrad, MatmulAccumulateAddsToOut) {
  const int N = 3, C = 4, OC = 5;
  auto inp = randn(N * C, 12), w = randn(OC * C, 13), b = randn(OC, 14), base = randn(N * OC, 15);
  std::vector<double> plain(N * OC), acc = base;
  matmul_forward(plain.data(), inp.data(), w.data(), b.data(), N, C, OC);
  matmul_forward(acc.data(), inp.data(), w.data(), b.data(), N, C, OC, true);
  for (int i = 0; i < N * OC; ++i) EXPECT_NEAR(acc[i], base[i] + plain[i], 1e-12);
}

void attention_case(int B, int T, int NH, int KVH, int hs, unsigned seed) {
  const int C = NH * hs, QKV = (NH + 2 * KVH) * hs;
  auto qkv = randn(static_cast<size_t>(B) * T * QKV, seed), R = randn(static_cast<size_t>(B) * T * C, seed + 1);
  std::vector<double> out(B * T * C), att(static_cast<size_t>(B) * NH * T * T), dqkv(qkv.size()),
      datt(att.size());
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, hs);
    return dot(out, R);
  };
  loss();
  // Causality: the probabilities above the diagonal are exactly zero and rows sum to one.
  for (int bh = 0; bh < B * NH; ++bh)
    for (int t = 0; t < T; ++t) {
      double sum = 0;
      for (int j = 0; j < T; ++j) {
        const double p = att[(static_cast<size_t>(bh) * T + t) * T + j];
        if (j > t) ASSERT_EQ(p, 0.0);
        sum += p;
      }
      ASSERT_NEAR(sum, 1.0, 1e-12);
    }
  attention_backward(dqkv.data(), datt.data(), R.data(), qkv.data(), att.data(), B, T, NH, KVH, hs);
  expect_ok(fd_check(loss, qkv.data(), dqkv.data(), static_cast<int64_t>(qkv.size())), "dqkv");
}

TEST(LayerGrad, AttentionMultiHead) { attention_case(2, 5, 2, 2, 3, 20); }
TEST(LayerGrad, AttentionGroupedQuery) { attention_case(2, 6, 4, 2, 2, 30); }
TEST(LayerGrad, AttentionMultiQueryTwoRowBlocks) {
  // T = 70 > 64 runs two causal row blocks; KVH = 1 is multi-query attention.
  attention_case(1, 70, 2, 1, 2, 40);
}

TEST(LayerGrad, AttentionFutureTokensDoNotLeak) {
  // Changing the last position's keys and values must not change earlier outputs.
  const int B = 1, T = 6, NH = 2, KVH = 1, hs = 3, C = NH * hs, QKV = (NH + 2 * KVH) * hs;
  auto qkv = randn(B * T * QKV, 50);
  std::vector<double> o1(B * T * C), o2(B * T * C), att(B * NH * T * T);
  attention_forward(o1.data(), att.data(), qkv.data(), B, T, NH, KVH, hs);
  for (int c = NH * hs; c < QKV; ++c) qkv[(T - 1) * QKV + c] += 1.0;
  attention_forward(o2.data(), att.data(), qkv.data(), B, T, NH, KVH, hs);
  for (int i = 0; i < (T - 1) * C; ++i) EXPECT_EQ(o1[i], o2[i]);
  double last = 0;
  for (int i = (T - 1) * C; i < T * C; ++i) last += std::abs(o1[i] - o2[i]);
  EXPECT_GT(last, 1e-6);
}

TEST(LayerGrad, Gelu) {
  const int N = 40;
  auto inp = randn(N, 60, 2.0), R = randn(N, 61);
  std::vector<double> out(N), dinp(N);
  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), N);
    return dot(out, R);
  };
  gelu_backward(dinp.data(), inp.data(), R.data(), N);
  expect_ok(fd_check(loss, inp.data(), dinp.data(), N), "dinp");
}

TEST(LayerGrad, Residual) {
  const int N = 12;
  auto a = randn(N, 70), b = randn(N, 71), R = randn(N, 72);
  std::vector<double> out(N), da(N, 0), db(N, 0);
  auto loss = [&] {
    residual_forward(out.data(), a.data(), b.data(), N);
    return dot(out, R);
  };
  residual_backward(da.data(), db.data(), R.data(), N);
  expect_ok(fd_check(loss, a.data(), da.data(), N), "da");
  expect_ok(fd_check(loss, b.data(), db.data(), N), "db");
}

TEST(LayerGrad, CrossEntropy) {
  const int N = 5, V = 9;
  auto logits = randn(N * V, 80, 3.0);
  std::vector<int32_t> tgt{0, 8, 3, 3, 5};
  std::vector<double> probs(N * V), losses(N), dlogits(N * V);
  auto loss = [&] { return crossentropy_forward(probs.data(), losses.data(), logits.data(), tgt.data(), N, V); };
  // The loss value itself: mean of -log softmax at the target, computed independently.
  double ref = 0;
  for (int n = 0; n < N; ++n) {
    double z = 0;
    for (int j = 0; j < V; ++j) z += std::exp(logits[n * V + j]);
    ref += -(logits[n * V + tgt[n]] - std::log(z));
  }
  EXPECT_NEAR(loss(), ref / N, 1e-12);
  crossentropy_backward(dlogits.data(), probs.data(), tgt.data(), 1.0, N, V);
  expect_ok(fd_check(loss, logits.data(), dlogits.data(), N * V), "dlogits");
}

TEST(LayerOptimizer, AdamWMatchesClosedForm) {
  // torch.optim.AdamW: p -= lr*wd*p; m, v moments; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
  AdamWConfig cfg;
  cfg.lr = 0.01;
  cfg.weight_decay = 0.1;
  std::vector<double> p{1.0, -2.0, 0.5}, g{0.3, -0.1, 0.0}, m(3, 0), v(3, 0);
  std::vector<double> rp = p, rm(3, 0), rv(3, 0);
  for (int t = 1; t <= 3; ++t) {
    adamw_update(p.data(), g.data(), m.data(), v.data(), 3, cfg, cfg.weight_decay, t);
    for (int i = 0; i < 3; ++i) {
      rp[i] *= 1 - cfg.lr * cfg.weight_decay;
      rm[i] = cfg.beta1 * rm[i] + (1 - cfg.beta1) * g[i];
      rv[i] = cfg.beta2 * rv[i] + (1 - cfg.beta2) * g[i] * g[i];
      const double mh = rm[i] / (1 - std::pow(cfg.beta1, t)), vh = rv[i] / (1 - std::pow(cfg.beta2, t));
      rp[i] -= cfg.lr * mh / (std::sqrt(vh) + cfg.eps);
    }
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(p[i], rp[i], 1e-12);
    EXPECT_NEAR(m[i], rm[i], 1e-15);
    EXPECT_NEAR(v[i], rv[i], 1e-15);
  }
  EXPECT_LT(p[0], 1.0);  // a positive gradient and decay move the weight down
}
