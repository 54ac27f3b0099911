// Tensor-parallel sharding of the step engine (issue 10) without communication: every
// rank's slices come from the canonical full weights and gather back to them exactly, and
// the memory each rank allocates matches the closed forms.
#include <gtest/gtest.h>

#include <vector>

#include "common/config.hpp"
#include "model/model.hpp"
#include "common/sharding.hpp"

using namespace meshbench::parallel;

namespace {
// heads 8, kv heads 4 (GQA; head size 8), vocabulary 509: not divisible by 2 or 4, so the
// last rank pads.
GptConfig tp_shape() {
  GptConfig c = preset("tiny");
  c.heads = 8;
  c.kv_heads = 4;
  c.vocab = 509;
  return c;
}

GptOptions tp_options(int t, int r, bool sp = false, bool regather = true) {
  GptOptions o;
  o.tp.size = t;
  o.tp.rank = r;
  o.tp.mode.sp = sp;
  o.tp.mode.regather = regather;
  return o;
}
}  // namespace

TEST(TensorParallelShards, GatherBackToTheCanonicalWeights) {
  for (bool tied : {true, false}) {
    GptConfig c = tp_shape();
    c.tied = tied;
    const Gpt<float> whole(c);
    const std::vector<float> ref = whole.canonical_weights(7);
    const Layout full = Gpt<float>::full_layout(c);
    for (int t : {1, 2, 4}) {
      std::vector<float> gathered(static_cast<size_t>(full.total()), -1.f);
      std::vector<uint8_t> owned(gathered.size(), 0);
      std::vector<int> holders(gathered.size(), 0);
      for (int r = 0; r < t; ++r) {
        const Gpt<float> shard(c, cpu_backend<float>(), tp_options(t, r));
        std::vector<uint8_t> mine(gathered.size(), 0);
        place_in_full(shard.layout(), shard.canonical_weights(7).data(), full, gathered.data(), mine.data());
        for (size_t i = 0; i < mine.size(); ++i) {
          owned[i] |= mine[i];
          holders[i] += mine[i];
        }
      }
      for (const auto& e : full.entries()) {
        for (int64_t i = e.offset; i < e.offset + e.numel; ++i) {
          ASSERT_TRUE(owned[size_t(i)]) << e.name << " element " << i - e.offset << " at t=" << t;
          ASSERT_EQ(gathered[size_t(i)], ref[size_t(i)]) << e.name << " at t=" << t;  // bit-exact
        }
        // Split tensors are held once; the replicated ones (norms, wpe, row-parallel biases) by all.
        const bool split = e.name.find("qkv") != std::string::npos || e.name.find("fc.") != std::string::npos ||
                           e.name.find(".proj.weight") != std::string::npos || e.name == "wte" ||
                           e.name.find("lm_head") != std::string::npos;
        EXPECT_EQ(holders[size_t(e.offset)], split ? 1 : t) << e.name << " at t=" << t;
      }
    }
  }
}

TEST(TensorParallelShards, QkvSlicesWholeHeadsOfEachPart) {
  const GptConfig c = tp_shape();  // hs 8: q rows 64, k rows 32, v rows 32
  const Gpt<float> r1(c, cpu_backend<float>(), tp_options(2, 1));
  const LayoutEntry& e = r1.layout().find("h.0.attn.qkv.weight");
  EXPECT_EQ(e.shape, (std::vector<int64_t>{64, 64}));  // (4 + 2 x 2) heads x 8
  const LayoutEntry& f = Gpt<float>::full_layout(c).find("h.0.attn.qkv.weight");
  std::vector<std::tuple<int64_t, int64_t, int64_t>> runs;
  for_each_run(e, f, [&](int64_t lo, int64_t fo, int64_t n) { runs.emplace_back(lo - e.offset, fo - f.offset, n); });
  ASSERT_EQ(runs.size(), 64u);
  EXPECT_EQ(std::get<1>(runs[0]), 32 * 64);           // query rows 32.. (heads 4..7)
  EXPECT_EQ(std::get<1>(runs[32]), (64 + 16) * 64);   // key rows 64 + 16.. (kv heads 2, 3)
  EXPECT_EQ(std::get<1>(runs[48]), (96 + 16) * 64);   // value rows 96 + 16..
}

TEST(TensorParallelShards, PaddedVocabularyRowsAreZeroAndDropped) {
  const GptConfig c = tp_shape();  // 509 = 4 x 128 - 3
  const Gpt<float> last(c, cpu_backend<float>(), tp_options(4, 3));
  EXPECT_EQ(last.tp_dims().vocab, 128);
  EXPECT_EQ(last.tp_dims().vocab_valid, 125);
  EXPECT_EQ(last.tp_dims().vocab_first, 384);
  const std::vector<float> w = last.canonical_weights(7);
  const LayoutEntry& e = last.layout().find("wte");
  for (int64_t i = 125 * c.hidden; i < e.numel; ++i) ASSERT_EQ(w[size_t(e.offset + i)], 0.f);
}

TEST(TensorParallelAccounting, MemoryAllocatedMatchesAnalytic) {
  const GptConfig c = tp_shape();
  struct Mode {
    bool sp, regather;
  };
  for (int t : {2, 4})
    for (Mode md : {Mode{false, true}, Mode{true, true}, Mode{true, false}}) {
      const GptOptions o = tp_options(t, t - 1, md.sp, md.regather);
      const Gpt<float> m(c, cpu_backend<float>(), o);
      const auto a = m.memory_allocated(), f = Gpt<float>::memory_analytic(c, 4, o.tp);
      const int64_t pad = 16 * 4 * static_cast<int64_t>(m.layout().entries().size());
      EXPECT_LE(f.params, a.params);
      EXPECT_LE(a.params - f.params, pad) << "t=" << t << " sp=" << md.sp;
      EXPECT_LE(f.activations, a.activations);
      EXPECT_LE(a.activations - f.activations, 16 * 4 * 80) << "t=" << t << " sp=" << md.sp;
      EXPECT_EQ(a.buffers, f.buffers) << "t=" << t << " sp=" << md.sp << " regather=" << md.regather;
    }
}
