// The whole GPT of the step engine: finite-difference gradients of the loss in float64 for
// every parameter of a tiny model (tied and untied head, grouped-query attention), the
// 200-step training test, configuration rules, layout, memory and FLOP accounting.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/config.hpp"
#include "core/error.hpp"
#include "kernels/flops.hpp"
#include "gradcheck.hpp"
#include "model/model.hpp"

using namespace meshbench::parallel;

namespace {

GptConfig tiny(bool tied) {
  GptConfig c;
  c.layers = 2;
  c.hidden = 8;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 12;
  c.seq = 6;
  c.max_seq = 8;
  c.vocab = 11;
  c.micro_batch = 2;
  c.tied = tied;
  return c;
}

// opts: the attention and recomputation under test (issue 29: the flash backward and the
// recomputed blocks' backward against finite differences of the loss); seq: the sequence
// length (70 crosses the flash tiles' 64-row boundary).
void model_gradcheck(bool tied, GptOptions opts = {}, int seq = 6) {
  GptConfig c = tiny(tied);
  c.seq = seq;
  c.max_seq = std::max(c.max_seq, seq);
  validate(c);
  Gpt<double> m(c, cpu_backend<double>(), opts);
  m.init_weights(7);
  // Larger, non-trivial weights than GPT-2's 0.02 so every path carries signal; norm
  // parameters and biases too.
  std::mt19937 g(3);
  std::normal_distribution<double> d(0.0, 0.3);
  for (const auto& e : m.layout().entries())
    for (int64_t i = 0; i < e.numel; ++i) m.params()[e.offset + i] += d(g);
  std::vector<int32_t> tok(c.tokens()), tgt(c.tokens());
  synthetic_batch(tok.data(), tgt.data(), DataKind::kRandom, 5, 0, 0, c.micro_batch, c.seq, c.vocab);
  m.zero_grad();
  m.forward(tok.data(), tgt.data());
  m.backward();
  std::vector<double> ana(m.grads(), m.grads() + m.layout().total());
  auto loss = [&] { return static_cast<double>(m.forward(tok.data(), tgt.data())); };
  for (const auto& e : m.layout().entries()) {
    const auto err = test::fd_check(loss, m.params() + e.offset, ana.data() + e.offset, e.numel);
    EXPECT_LT(err.norm_rel, 1e-6) << e.name;
    EXPECT_LT(err.worst_rel, 1e-6) << e.name;
  }
  // Rows of the position table beyond seq get no gradient.
  const auto& wpe = m.layout().find("wpe");
  for (int64_t i = int64_t{c.seq} * c.hidden; i < wpe.numel; ++i) EXPECT_EQ(ana[wpe.offset + i], 0.0);
}

}  // namespace

TEST(ModelGrad, TiedHeadGroupedQuery) { model_gradcheck(true); }
TEST(ModelGrad, UntiedHeadGroupedQuery) { model_gradcheck(false); }

GptOptions attention_options(bool flash, bool selective, int recompute_blocks) {
  GptOptions o;
  o.flash = flash;
  o.recompute_attention = selective;
  o.recompute_blocks = recompute_blocks;
  return o;
}
TEST(ModelGrad, FlashAttention) { model_gradcheck(false, attention_options(true, false, 0), 70); }
TEST(ModelGrad, FlashWithFullRecomputation) { model_gradcheck(true, attention_options(true, false, 2), 70); }
TEST(ModelGrad, FullRecomputationOfTheFirstBlock) { model_gradcheck(false, attention_options(false, false, 1)); }
TEST(ModelGrad, SelectiveRecomputation) { model_gradcheck(true, attention_options(false, true, 0)); }
TEST(ModelGrad, FlashWithSelectiveRecomputation) { model_gradcheck(false, attention_options(true, true, 0), 70); }

TEST(ModelGrad, InitialLossIsLogVocab) {
  // GPT-2 init gives near-uniform predictions: the loss starts at about ln V.
  GptConfig c = tiny(true);
  c.vocab = 64;
  Gpt<double> m(c);
  m.init_weights(1);
  std::vector<int32_t> tok(c.tokens()), tgt(c.tokens());
  synthetic_batch(tok.data(), tgt.data(), DataKind::kRandom, 1, 0, 0, c.micro_batch, c.seq, c.vocab);
  EXPECT_NEAR(m.forward(tok.data(), tgt.data()), std::log(64.0), 0.05);
}

TEST(ModelTraining, LossFallsOnRepeatingSequence) {
  // A period-8 sequence is learnable from position alone: 200 AdamW steps must bring the
  // loss from ln(64) = 4.16 to below 0.5 (it reaches about 0.08). A sign error in any
  // gradient or in the update keeps it near 4.
  GptConfig c;
  c.layers = 2; c.hidden = 32; c.heads = 4; c.kv_heads = 2; c.ffn = 128;
  c.seq = 32; c.max_seq = 32; c.vocab = 64; c.micro_batch = 2;
  Gpt<float> m(c);
  m.init_weights(1234);
  AdamWConfig adam;  // lr 1e-3
  std::vector<int32_t> tok(c.tokens()), tgt(c.tokens());
  float first = 0, last = 0;
  for (int s = 0; s < 200; ++s) {
    synthetic_batch(tok.data(), tgt.data(), DataKind::kRepeat, 1234, s, 0, c.micro_batch, c.seq, c.vocab);
    m.zero_grad();
    last = m.forward(tok.data(), tgt.data());
    if (s == 0) first = last;
    m.backward();
    m.update(adam, s + 1);
  }
  EXPECT_GT(first, 4.0);
  EXPECT_LT(last, 0.5);
}

TEST(ModelTraining, RandomTokensDoNotFall) {
  // The control: on fresh random tokens there is nothing to learn, so the loss stays near
  // ln V. This shows the training test's threshold can fail.
  GptConfig c;
  c.layers = 1; c.hidden = 32; c.heads = 4; c.kv_heads = 4; c.ffn = 128;
  c.seq = 32; c.max_seq = 32; c.vocab = 64; c.micro_batch = 2;
  Gpt<float> m(c);
  m.init_weights(1);
  std::vector<int32_t> tok(c.tokens()), tgt(c.tokens());
  float last = 0;
  for (int s = 0; s < 50; ++s) {
    synthetic_batch(tok.data(), tgt.data(), DataKind::kRandom, 9, s, 0, c.micro_batch, c.seq, c.vocab);
    m.zero_grad();
    last = m.forward(tok.data(), tgt.data());
    m.backward();
    m.update(AdamWConfig{}, s + 1);
  }
  EXPECT_GT(last, 3.5);
}

TEST(Config, RulesThrowUsageErrorNamingTheOption) {
  auto msg = [](GptConfig c) -> std::string {
    try {
      validate(c);
    } catch (const meshbench::core::UsageError& e) {
      return e.what();
    }
    return "";
  };
  GptConfig c = preset("tiny");
  EXPECT_EQ(msg(c), "");
  c.heads = 3;
  EXPECT_NE(msg(c).find("--heads 3 must divide --hidden 64"), std::string::npos);
  c = preset("tiny");
  c.kv_heads = 3;
  EXPECT_NE(msg(c).find("--kv-heads 3 must divide --heads 4"), std::string::npos);
  c = preset("tiny");
  c.seq = 65;
  EXPECT_NE(msg(c).find("--seq 65 exceeds the position table"), std::string::npos);
  c = preset("tiny");
  c.layers = 0;
  EXPECT_NE(msg(c).find("--layers"), std::string::npos);
  EXPECT_THROW(preset("huge"), meshbench::core::UsageError);
}

TEST(Layout, OffsetsAlignedDisjointAndNamed) {
  Gpt<float> m(preset("tiny"));
  int64_t end = 0;
  for (const auto& e : m.layout().entries()) {
    EXPECT_EQ(e.offset % 16, 0) << e.name;
    EXPECT_GE(e.offset, end) << e.name;
    int64_t n = 1;
    for (auto d : e.shape) n *= d;
    EXPECT_EQ(n, e.numel) << e.name;
    end = e.offset + e.numel;
  }
  EXPECT_EQ(end, m.layout().total());
  EXPECT_EQ(m.layout().find("h.1.attn.qkv.weight").shape, (std::vector<int64_t>{192, 64}));
  EXPECT_THROW(m.layout().find("lm_head.weight"), std::out_of_range);  // tied
  GptConfig u = preset("tiny");
  u.tied = false;
  Gpt<float> mu(u);
  EXPECT_EQ(mu.num_params(), m.num_params() + int64_t{u.vocab} * u.hidden);
}

TEST(Accounting, MemoryAllocatedMatchesAnalytic) {
  for (bool tied : {true, false}) {
    GptConfig c = preset("small");
    c.tied = tied;
    c.kv_heads = 2;
    Gpt<float> m(c);
    const auto a = m.memory_allocated(), f = Gpt<float>::memory_analytic(c, 4);
    const int64_t pad = 16 * 4 * static_cast<int64_t>(m.layout().entries().size());
    EXPECT_LE(f.params, a.params);
    EXPECT_LE(a.params - f.params, pad);
    EXPECT_EQ(a.params, a.grads);
    EXPECT_EQ(a.optimizer, 2 * a.params);
    EXPECT_LE(f.activations, a.activations);
    EXPECT_LE(a.activations - f.activations, 16 * 4 * 64);
    EXPECT_EQ(a.buffers, f.buffers);
  }
}

// Each attention and recomputation mode: the measured categories equal the closed forms
// (activations up to the 16-element alignment of each entry, buffers exactly).
TEST(Accounting, MemoryMatchesAnalyticUnderFlashAndRecomputation) {
  GptConfig c = preset("small");
  c.kv_heads = 2;
  c.layers = 3;
  for (const GptOptions& o : {attention_options(true, false, 0), attention_options(false, true, 0),
                              attention_options(true, true, 0),
                              attention_options(true, false, 2), attention_options(false, false, 3)}) {
    Gpt<float> m(c, cpu_backend<float>(), o);
    const auto a = m.memory_allocated();
    const auto f = Gpt<float>::memory_analytic(c, 4, {}, {}, {}, o.flash, o.recompute_attention, o.recompute_blocks);
    EXPECT_LE(f.activations, a.activations) << o.flash << o.recompute_attention << o.recompute_blocks;
    EXPECT_LE(a.activations - f.activations, 16 * 4 * 64);
    EXPECT_EQ(a.buffers, f.buffers) << o.flash << o.recompute_attention << o.recompute_blocks;
  }
  // full recomputation of every block: each of the 3 gives up all but its output, and one
  // block's worth becomes scratch
  const auto none = Gpt<float>::memory_analytic(c, 4, {}, {}, {}, true);
  const auto full = Gpt<float>::memory_analytic(c, 4, {}, {}, {}, true, false, 3);
  EXPECT_GT(full.buffers, none.buffers);
  EXPECT_EQ(none.activations - full.activations, 3 * (full.buffers - none.buffers));
}

TEST(Accounting, FlopsFromShapes) {
  GptConfig c = preset("medium");  // L4 C512 NH8 T256 B4 V8192
  const double N = 4 * 256, C = 512, F = 2048, V = 8192, L = 4;
  const double fwd = 2 * N * (3 * C * C + C * C + 2 * C * F) * L + 2 * N * C * V;
  const StepFlops f = step_flops(c);
  EXPECT_DOUBLE_EQ(f.forward_gemm, fwd);
  EXPECT_DOUBLE_EQ(f.backward_gemm, 2 * fwd);
  // 64-row causal blocks at T = 256: key columns 64+128+192+256 per 64 rows.
  const double macs = 64.0 * (64 + 128 + 192 + 256) * 64;  // per (b, h) product, hs = 64
  EXPECT_DOUBLE_EQ(f.attention_forward, 2 * 2 * macs * 4 * 8 * L);
  EXPECT_DOUBLE_EQ(f.attention_backward, 4 * 2 * macs * 4 * 8 * L);
  EXPECT_EQ(largest_gemm(c).name, "lm_head");
}

TEST(Data, SyntheticBatchIsAFunctionOfItsIndex) {
  const int B = 3, T = 7, V = 50;
  std::vector<int32_t> a(B * T), at(B * T), b(T), bt(T);
  synthetic_batch(a.data(), at.data(), DataKind::kRandom, 11, 4, 10, B, T, V);
  synthetic_batch(b.data(), bt.data(), DataKind::kRandom, 11, 4, 12, 1, T, V);  // sample 12 alone
  for (int t = 0; t < T; ++t) {
    EXPECT_EQ(a[2 * T + t], b[t]);
    EXPECT_EQ(at[2 * T + t], bt[t]);
  }
  for (int t = 0; t + 1 < T; ++t) EXPECT_EQ(at[t], a[t + 1]);  // targets are the next token
  for (int v : a) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, V);
  }
}
