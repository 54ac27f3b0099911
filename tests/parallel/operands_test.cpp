// Bounds of every strided operand the CUDA backend passes to cuBLAS (issue 17, defect 3):
// each GEMM plan of operands.hpp, for every head of every sample, at the shapes the tests
// and presets use, stays inside the arrays the model allocates; bf16 staging converts whole
// arrays (numel elements), so staged views obey the same bounds.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "kernels/operands.hpp"

using namespace meshbench::parallel;

namespace {

void expect_inside(const GemmPlan& g, const std::function<int64_t(Array)>& size, const std::string& where) {
  EXPECT_TRUE(plan_consistent(g)) << where;
  for (const View* v : {&g.a, &g.b, &g.c}) {
    EXPECT_GE(v->offset, 0) << where;
    EXPECT_LE(view_end(*v), size(v->array)) << where << " " << array_name(v->array);
  }
}

std::vector<AttentionShape> attention_shapes() {
  std::vector<AttentionShape> out{{2, 70, 4, 2, 16}};  // layer_parity's shape
  for (const auto& name : preset_names()) {
    const GptConfig c = preset(name);
    for (int kvh : {c.heads, c.heads / 2, 1})
      if (kvh >= 1 && c.heads % kvh == 0)
        out.push_back({c.micro_batch, c.seq, c.heads, kvh, c.head_size()});
  }
  return out;
}

}  // namespace

TEST(Operands, AttentionPlansStayInsideTheirArrays) {
  for (const AttentionShape& s : attention_shapes()) {
    auto size = [&](Array a) { return numel(s, a); };
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < s.NH; ++h) {
        const std::string where = "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                                  " NH=" + std::to_string(s.NH) + " KVH=" + std::to_string(s.KVH) +
                                  " b=" + std::to_string(b) + " h=" + std::to_string(h);
        for (const auto& g : attention_forward_gemms(s, b, h)) expect_inside(g, size, where);
        for (const auto& g : attention_backward_gemms(s, b, h)) expect_inside(g, size, where);
      }
  }
}

TEST(Operands, TheLastHeadsSliceEndsBeforeRowsTimesLd) {
  // The extent rows*ld that issue 17 found staged would pass the end of qkv: the bound that
  // holds is (rows-1)*ld + cols.
  const AttentionShape s{2, 70, 4, 2, 16};
  const View v = attention_forward_gemms(s, s.B - 1, s.NH - 1)[1].b;  // the last V head
  EXPECT_EQ(view_end(v), numel(s, Array::kQkv));
  EXPECT_GT(v.offset + int64_t(v.rows) * v.ld, numel(s, Array::kQkv));
}

TEST(Operands, MatmulPlansStayInsideTheirArrays) {
  for (const auto& name : preset_names()) {
    const GptConfig c = preset(name);
    const int N = c.micro_batch * c.seq, C = c.hidden;
    for (const MatmulShape& s : {MatmulShape{N, C, c.qkv_width()}, MatmulShape{N, C, C},
                                 MatmulShape{N, C, c.ffn}, MatmulShape{N, c.ffn, C},
                                 MatmulShape{N, C, c.vocab}, MatmulShape{140, 64, 96}}) {
      auto size = [&](Array a) { return numel(s, a); };
      const std::string where = name + " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
                                " OC=" + std::to_string(s.OC);
      expect_inside(matmul_forward_gemm(s), size, where);
      for (const auto& g : matmul_backward_gemms(s)) expect_inside(g, size, where);
    }
  }
}

// Issue 30, defect 6: the attention's strided batches stand for exactly the per-head GEMMs,
// B x NH/KVH batches of KVH entries, and no two entries of one batch write overlapping blocks
// (the dK and dV of a batch are in distinct KV heads). The emulation backend runs these very
// batches, entry by entry, in the Emulation.* parity tests.
TEST(Operands, AttentionBatchesStandForEveryHeadOnce) {
  auto key = [](const GemmPlan& g) {
    return std::to_string(int(g.a.array)) + ":" + std::to_string(g.a.offset) + "/" + std::to_string(int(g.b.array)) +
           ":" + std::to_string(g.b.offset) + "/" + std::to_string(int(g.c.array)) + ":" + std::to_string(g.c.offset) +
           "/" + std::to_string(g.M) + "," + std::to_string(g.N) + "," + std::to_string(g.K) + "," +
           std::to_string(g.beta);
  };
  for (const AttentionShape& s : attention_shapes())
    for (int backward = 0; backward < 2; ++backward)
      for (int which = 0; which < (backward ? 4 : 2); ++which) {
        std::multiset<std::string> want, got;
        for (int b = 0; b < s.B; ++b)
          for (int h = 0; h < s.NH; ++h)
            want.insert(key(backward ? attention_backward_gemms(s, b, h)[size_t(which)]
                                     : attention_forward_gemms(s, b, h)[size_t(which)]));
        const std::vector<GemmBatch> batches = attention_batches(s, backward != 0, which);
        EXPECT_EQ(batches.size(), size_t(s.B) * size_t(s.NH / s.KVH));
        for (const GemmBatch& g : batches) {
          EXPECT_EQ(g.count, s.KVH);
          for (int i = 0; i < g.count; ++i) got.insert(key(batch_entry(g, i)));
          if (g.count > 1) {  // the written blocks of consecutive entries do not overlap
            const int64_t block = int64_t(g.first.c.rows - 1) * g.first.c.ld + g.first.c.cols;
            EXPECT_TRUE(g.sc >= block || g.sc >= g.first.c.cols) << "entries write overlapping blocks";
            EXPECT_NE(g.sc, 0);
          }
        }
        EXPECT_EQ(got, want) << "B=" << s.B << " NH=" << s.NH << " KVH=" << s.KVH << " backward=" << backward
                             << " which=" << which;
      }
}

// Issue 30, defect 14: context parallel's chunk attention in GEMM form. Every plan stays inside
// the arrays the caller passes (strided views of packed qkv rows, as attention.cpp passes them,
// and the scratch the backend allocates), and the batches over the KV groups stand for every
// head's GEMMs exactly once, their entries writing disjoint blocks.
TEST(Operands, ChunkPlansStayInsideTheirArraysAndBatchEveryHeadOnce) {
  auto key = [](const GemmPlan& g) {
    return std::to_string(int(g.a.array)) + ":" + std::to_string(g.a.offset) + "/" + std::to_string(int(g.b.array)) +
           ":" + std::to_string(g.b.offset) + "/" + std::to_string(int(g.c.array)) + ":" + std::to_string(g.c.offset);
  };
  for (const auto& [B, Tq, Tk, NH, KVH, hs] : std::vector<std::array<int, 6>>{{2, 35, 35, 4, 2, 16}, {1, 8, 24, 6, 3, 8},
                                                                            {3, 16, 16, 4, 4, 32}, {1, 5, 7, 8, 1, 4}}) {
    const int QKV = (NH + 2 * KVH) * hs, C = NH * hs;
    const ChunkShape s{B, Tq, Tk, NH, KVH, hs, QKV, QKV, QKV, C, C, QKV, QKV, QKV};
    // a strided view's last row ends at offset + (rows - 1) ld + cols: the arrays the caller
    // passes start at the head's column (k at NH hs, v at (NH + KVH) hs of a qkv row)
    auto size = [&](Array a) {
      switch (a) {
        case Array::kK: case Array::kDk: return int64_t(B) * Tk * QKV - NH * hs;
        case Array::kV: case Array::kDv: return int64_t(B) * Tk * QKV - (NH + KVH) * hs;
        default: return numel(s, a);
      }
    };
    const std::string where = "B=" + std::to_string(B) + " Tq=" + std::to_string(Tq) + " Tk=" + std::to_string(Tk) +
                              " NH=" + std::to_string(NH) + " KVH=" + std::to_string(KVH);
    for (int backward = 0; backward < 2; ++backward)
      for (int which = 0; which < (backward ? 5 : 2); ++which) {
        std::multiset<std::string> want, got;
        for (int b = 0; b < B; ++b)
          for (int h = 0; h < NH; ++h) {
            const GemmPlan g = backward ? chunk_backward_gemms(s, b, h)[size_t(which)] : chunk_forward_gemms(s, b, h)[size_t(which)];
            expect_inside(g, size, where);
            want.insert(key(g));
          }
        for (const GemmBatch& g : chunk_batches(s, backward != 0, which)) {
          EXPECT_EQ(g.count, KVH);
          for (int i = 0; i < g.count; ++i) got.insert(key(batch_entry(g, i)));
          if (g.count > 1) EXPECT_NE(g.sc, 0) << where;
        }
        EXPECT_EQ(got, want) << where << " backward=" << backward << " which=" << which;
      }
  }
}
