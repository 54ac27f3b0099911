// A pipeline stage of the model without MPI (issue 11): two stages of a tiny GPT (and an
// interleaved split of two chunks per stage) chained by hand, the output activations of one
// copied into the next one's input and the input gradients back, give the whole model's loss
// and every gradient by name (the tied wte's two copies summed); the activation slots are
// taken at a chunk's forward and freed after its backward; with MoE blocks, each chunk's aux
// losses are its part of the loss and two micro-batches in flight keep their own routing.
// And the bubble metric on a hand-made trace.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/layout.hpp"
#include "metrics/metrics.hpp"
#include "model/model.hpp"
#include "pipeline_parallel/plan.hpp"

using namespace meshbench::parallel;

namespace {
GptConfig tiny_stage_model(bool tied, int experts = 0) {
  GptConfig c;
  c.experts = experts;  // MoE blocks in every layer (top-2), aux loss 0.01
  c.aux_loss_coef = 0.05;
  c.layers = 4;
  c.hidden = 8;
  c.heads = 2;
  c.kv_heads = 1;
  c.ffn = 16;
  c.seq = 6;
  c.max_seq = 8;
  c.vocab = 11;
  c.micro_batch = 2;
  c.tied = tied;
  return c;
}

// The whole model's gradient of `name`, or the sum over stages of theirs (wte on both ends).
std::vector<double> grad_of(const Gpt<double>& m, const std::string& name) {
  std::vector<double> g;
  for (const auto& e : m.layout().entries())
    if (e.name == name) g.assign(m.grads() + e.offset, m.grads() + e.offset + e.numel);
  return g;
}

// Stages: per pipeline rank, the (chunk -> layers) list; virtual stage c x P + r. With
// `experts`, MoE blocks, and every micro-batch's forward runs before the first backward
// (GPipe's order), so each stage holds two micro-batches' routing at once; every chunk's
// part of the loss (its aux losses, the head's cross-entropy) sums to the whole model's.
void chained_equals_whole(bool tied, const std::vector<std::vector<std::pair<int, int>>>& stage_chunks,
                          int experts = 0) {
  const GptConfig c = tiny_stage_model(tied, experts);
  validate(c);
  const int P = static_cast<int>(stage_chunks.size()), V = static_cast<int>(stage_chunks[0].size());
  Gpt<double> whole(c);
  whole.init_weights(3);
  std::vector<std::unique_ptr<Gpt<double>>> st;
  for (int r = 0; r < P; ++r) {
    GptOptions o;
    o.stage = StageSpec{stage_chunks[static_cast<size_t>(r)], r == 0, r == P - 1, 2};
    st.push_back(std::make_unique<Gpt<double>>(c, cpu_backend<double>(), o));
    st.back()->init_weights(3);
    st.back()->zero_grad();
  }
  std::vector<int32_t> tok(c.tokens()), tgt(c.tokens());
  const int64_t n = int64_t{c.tokens()} * c.hidden;
  double loss = 0, ref = 0;
  whole.zero_grad();
  auto forward = [&](int micro) {
    synthetic_batch(tok.data(), tgt.data(), DataKind::kRandom, 9, 0, micro * c.micro_batch, c.micro_batch, c.seq,
                    c.vocab);
    ref += whole.forward(tok.data(), tgt.data());
    whole.backward(0.5);
    for (int vs = 0; vs < P * V; ++vs) {  // forward through the virtual stages
      Gpt<double>& m = *st[static_cast<size_t>(vs % P)];
      if (vs > 0) {
        Gpt<double>& prev = *st[static_cast<size_t>((vs - 1) % P)];
        const double* out = prev.stage_output((vs - 1) / P, micro);
        std::copy(out, out + n, m.stage_input(vs / P, micro));
      }
      loss += m.forward_chunk(vs / P, micro, tok.data(), tgt.data());
    }
  };
  auto backward = [&](int micro) {
    std::vector<double> dout(static_cast<size_t>(n)), din(static_cast<size_t>(n));
    for (int vs = P * V - 1; vs >= 0; --vs) {  // and back
      Gpt<double>& m = *st[static_cast<size_t>(vs % P)];
      m.backward_chunk(vs / P, micro, 0.5, vs == P * V - 1 ? nullptr : dout.data(), vs == 0 ? nullptr : din.data());
      dout = din;
    }
  };
  for (int micro = 0; micro < 2; ++micro) {
    forward(micro);
    EXPECT_EQ(st.back()->slots_held(), experts > 0 ? V * (micro + 1) : V);
    if (experts == 0) backward(micro);
  }
  if (experts > 0)
    for (int micro = 0; micro < 2; ++micro) backward(micro);
  EXPECT_NEAR(loss, ref, 1e-12);
  for (const auto& s : st) EXPECT_EQ(s->slots_held(), 0);
  for (const auto& e : whole.layout().entries()) {
    std::vector<double> sum;
    int holders = 0;
    for (const auto& s : st) {
      const std::vector<double> g = grad_of(*s, e.name);
      if (g.empty()) continue;
      ++holders;
      if (sum.empty()) sum.assign(g.size(), 0.0);
      for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
    }
    EXPECT_EQ(holders, e.name == "wte" && tied ? 2 : 1) << e.name;
    const std::vector<double> want = grad_of(whole, e.name);
    ASSERT_EQ(sum.size(), want.size()) << e.name;
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(sum[i], want[i], 1e-12) << e.name << " " << i;
  }
}
}  // namespace

TEST(PipelineStage, TwoStagesTiedEqualWholeModel) { chained_equals_whole(true, {{{0, 2}}, {{2, 4}}}); }
TEST(PipelineStage, UnevenUntied) { chained_equals_whole(false, {{{0, 3}}, {{3, 4}}}); }
TEST(PipelineStage, InterleavedChunks) { chained_equals_whole(true, {{{0, 1}, {2, 3}}, {{1, 2}, {3, 4}}}); }
TEST(PipelineStage, MoeStagesCarryTheirAuxLossAndRoutingPerMicroBatch) {
  chained_equals_whole(true, {{{0, 1}, {2, 3}}, {{1, 2}, {3, 4}}}, 4);
}

TEST(PipelineStage, LayoutHoldsTheStagesTensorsByGlobalName) {
  GptOptions o;
  o.stage = StageSpec{{{2, 4}}, false, true, 1};
  Gpt<float> last(tiny_stage_model(true), cpu_backend<float>(), o);
  std::vector<std::string> names;
  for (const auto& e : last.layout().entries()) names.push_back(e.name);
  EXPECT_EQ(names.front(), "h.2.ln1.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "wte"), names.end());  // the tied head's copy
  EXPECT_EQ(std::find(names.begin(), names.end(), "wpe"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "h.1.ln1.weight"), names.end());
  EXPECT_EQ(last.units().size(), 3u);  // h.2, h.3, head
}

TEST(PipelineMetrics, BubbleAndReceiveSplit) {
  // One step [0, 10]; this rank computes [2, 5] and [6, 9]; a receive posted and waited on at
  // 5 completes at 6, its sender posted at 5.6: wait 0.6 (bubble), transfer 0.4 (exposed pp);
  // the other 3 s (before 2, after 9) are neither.
  Trace tr;
  tr.step_start = {0};
  tr.step_end = {10};
  tr.passes = {{0, 0, 0, 'F', 2, 5}, {0, 0, 0, 'B', 6, 9}};
  tr.ops = {{0, 0, 0, Op::kMatmul, 'F', 0, 2, 5}, {0, 0, 0, Op::kMatmul, 'B', 0, 6, 9}};
  CommEvent r{};
  r.dim = "pp";
  r.tags.step = 0;
  r.p2p = 'r';
  r.group = 0;
  r.tag = 7;
  r.t_post = 5;
  r.t_start = 5;
  r.t_wait = 5;
  r.t_end = 6;
  r.blocking = false;
  tr.comms.push_back(r);
  tr.slots = {{0, 5, 1, 100}, {0, 9, 0, 0}};
  const std::vector<P2pPost> posts = {{0, 0, 7, 's', 5.6}};
  const RankMetrics m = rank_metrics(tr, 3, 0.0, posts);
  EXPECT_NEAR(m.split.bubble, 0.6, 1e-12);
  EXPECT_NEAR(m.split.exposed.at("pp"), 0.4, 1e-12);
  EXPECT_NEAR(m.split.other, 3.0, 1e-12);
  const PipelineRow row = pipeline_row(tr, 3, 0.0, m.split, posts, 0.2);
  EXPECT_EQ(row.rank, 3);
  EXPECT_EQ(row.peak_held, 1);
  EXPECT_EQ(row.peak_activation_bytes, 100);
  EXPECT_NEAR(row.recv_wait_s, 0.6, 1e-12);
  EXPECT_NEAR(row.recv_transfer_s, 0.4, 1e-12);
  EXPECT_NEAR(row.bubble, 0.6 / 10, 1e-12);  // the time split's bubble over the rank's step
  EXPECT_DOUBLE_EQ(bubble_theory(2, 8, 1), 1.0 / 9);
  EXPECT_DOUBLE_EQ(bubble_theory(2, 8, 2), 1.0 / 17);
}
