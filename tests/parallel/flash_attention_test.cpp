// Attention without the T x T matrix (issue 29; kernels/layers.hpp flash_attention_*): the
// tiled forward with its online softmax and the backward that recomputes each tile from the
// row log-sum-exp equal the materialised attention (float64 to 1e-12, float32 to 1e-5), for
// multi-head, grouped-query and multi-query heads and sequence lengths below, at and across
// the tile sizes (not multiples of them); the lse is the rows' log-sum-exp of the scaled causal
// scores; central finite differences confirm the backward on its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "gradcheck.hpp"
#include "kernels/layers.hpp"

using namespace meshbench::parallel;
using meshbench::parallel::test::dot;
using meshbench::parallel::test::expect_ok;
using meshbench::parallel::test::fd_check;
using meshbench::parallel::test::randn;

namespace {

template <typename S>
double rel(const std::vector<S>& a, const std::vector<S>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num / den);
}

template <typename S>
void against_naive(int B, int T, int NH, int KVH, int hs, unsigned seed, double tol) {
  const int C = NH * hs, QKV = (NH + 2 * KVH) * hs;
  const std::vector<double> q64 = randn(size_t(B) * T * QKV, seed), dy64 = randn(size_t(B) * T * C, seed + 1);
  const std::vector<S> qkv(q64.begin(), q64.end()), dy(dy64.begin(), dy64.end());
  std::vector<S> ref(size_t(B) * T * C), att(size_t(B) * NH * T * T), dref(qkv.size()), datt(att.size());
  attention_forward(ref.data(), att.data(), qkv.data(), B, T, NH, KVH, hs);
  attention_backward(dref.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, T, NH, KVH, hs);
  std::vector<S> out(ref.size()), lse(size_t(B) * NH * T), dqkv(qkv.size(), S(7));  // written in full
  flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH, KVH, hs);
  flash_attention_backward(dqkv.data(), dy.data(), qkv.data(), out.data(), lse.data(), B, T, NH, KVH, hs);
  EXPECT_LT(rel(out, ref), tol) << "out, T=" << T;
  EXPECT_LT(rel(dqkv, dref), tol) << "dqkv, T=" << T;
  // lse: log sum_j<=t exp(q_t . k_j / sqrt(hs)), in float64 from the inputs
  const int group = NH / KVH;
  double worst = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(size_t(t) + 1);
        for (int j = 0; j <= t; ++j) {
          double acc = 0;
          for (int d = 0; d < hs; ++d)
            acc += q64[(size_t(b) * T + t) * QKV + h * hs + d] * q64[(size_t(b) * T + j) * QKV + (NH + h / group) * hs + d];
          s[size_t(j)] = acc / std::sqrt(double(hs));
        }
        const double m = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double x : s) sum += std::exp(x - m);
        worst = std::max(worst, std::abs(double(lse[(size_t(b) * NH + h) * T + t]) - (m + std::log(sum))));
      }
  EXPECT_LT(worst, tol * 10) << "lse, T=" << T;
}

}  // namespace

TEST(FlashAttention, EqualsMaterialisedAttentionInDouble) {
  for (int T : {1, 5, 64, 70, 128, 200, 257}) against_naive<double>(2, T, 4, 2, 8, 100u + T, 1e-12);  // GQA
  against_naive<double>(1, 130, 2, 2, 16, 7, 1e-12);  // multi-head
  against_naive<double>(2, 150, 4, 1, 4, 8, 1e-12);   // multi-query
}

TEST(FlashAttention, EqualsMaterialisedAttentionInFloat) {
  for (int T : {33, 128, 300}) against_naive<float>(2, T, 4, 2, 16, 200u + T, 1e-5);
}

TEST(FlashAttention, BackwardMatchesFiniteDifferences) {
  // T = 140 crosses a query and a key tile boundary (64, 128) with a partial last tile.
  for (auto [T, NH, KVH] : {std::tuple{6, 4, 2}, std::tuple{140, 2, 1}}) {
    const int B = 1, hs = 2, C = NH * hs, QKV = (NH + 2 * KVH) * hs;
    auto qkv = randn(size_t(B) * T * QKV, 50u + T), R = randn(size_t(B) * T * C, 51u + T);
    std::vector<double> out(size_t(B) * T * C), lse(size_t(B) * NH * T), dqkv(qkv.size());
    auto loss = [&] {
      flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH, KVH, hs);
      return dot(out, R);
    };
    loss();
    flash_attention_backward(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, T, NH, KVH, hs);
    expect_ok(fd_check(loss, qkv.data(), dqkv.data(), static_cast<int64_t>(qkv.size()), T > 64 ? 7 : 1), "dqkv");
  }
}
