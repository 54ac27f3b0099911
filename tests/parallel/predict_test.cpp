// The step model's wait at a collective (parallel/predict/predict.hpp, arrival_wait): a fixed
// lead of one rank combined with a random drift between the two; where a pass's items put
// tensor parallel's overlapped collectives, and which of ZeRO-3's calls are no meeting
// (parallel/predict/op_list.hpp, pass_items).
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/mesh.hpp"
#include "predict/op_list.hpp"
#include "predict/predict.hpp"
#include "step/rules.hpp"

namespace meshbench::parallel {
namespace {

// Half the mean of |offset + delta| for a Gaussian delta of mean absolute value `drift`, by
// quadrature (not the closed form under test).
double wait_by_quadrature(double offset, double drift) {
  const double sigma = drift * std::sqrt(std::numbers::pi / 2);
  const int n = 200000;
  const double lo = -12 * sigma, h = 24 * sigma / n;
  double sum = 0;
  for (int i = 0; i <= n; ++i) {
    const double x = lo + i * h, w = (i == 0 || i == n) ? 0.5 : 1.0;
    sum += w * std::abs(offset + x) * std::exp(-0.5 * x * x / (sigma * sigma));
  }
  return 0.5 * sum * h / (sigma * std::sqrt(2 * std::numbers::pi));
}

TEST(Predict, ArrivalWaitIsHalfTheFoldedNormalsMean) {
  EXPECT_DOUBLE_EQ(arrival_wait(0.0, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(arrival_wait(0.3, 0.0), 0.15);   // a lead alone: the later rank's lead, halved
  EXPECT_DOUBLE_EQ(arrival_wait(-0.3, 0.0), 0.15);
  EXPECT_NEAR(arrival_wait(0.0, 0.2), 0.1, 1e-15);  // a drift alone: its mean gap, halved
  for (const auto& [offset, drift] : {std::pair{0.0, 1.0}, {0.5, 1.0}, {1.0, 1.0}, {2.0, 1.0}, {0.01, 0.003}}) {
    const double want = wait_by_quadrature(offset, drift);
    EXPECT_NEAR(arrival_wait(offset, drift), want, 1e-9 * std::max(1.0, want)) << offset << " " << drift;
    // never less than either part alone, never more than both
    EXPECT_GE(arrival_wait(offset, drift), std::max(offset, drift) / 2 - 1e-15);
    EXPECT_LE(arrival_wait(offset, drift), (offset + drift) / 2 + 1e-15);
  }
  // a lead of a few drifts: the drift adds next to nothing (it changes how late, not who waits)
  EXPECT_NEAR(arrival_wait(5.0, 1.0), 2.5, 1e-3);
}

// A backward pass's items, labelled: a GEMM by its part ("dinput", "dweight", "bwd", ...), a
// tensor-parallel collective by its name ("all_gather", "reduce_scatter", "all_reduce"),
// anything else "-".
std::vector<std::string> backward_labels(bool sp, bool overlap) {
  Plan p;
  p.mesh_text = "tp=2";
  p.mesh = comm::parse_mesh(p.mesh_text);
  p.sp = sp;
  p.overlap = overlap;
  resolve_and_validate(p, 2);
  std::vector<std::string> out;
  for (const PassItem& it : pass_items(p, 0, 0, 'B', false, true))
    out.push_back(it.comm ? (it.dim == "tp" ? it.collective : "-") : it.op == Op::kMatmul ? it.part : "-");
  return out;
}

// What follows each column-parallel input-gradient GEMM ("dinput") and weight-gradient GEMM
// ("dweight"), and what precedes each "dinput", in order.
struct Around {
  std::vector<std::string> before_dinput, after_dinput, after_dweight;
};
Around around(const std::vector<std::string>& l) {
  Around a;
  for (size_t i = 0; i + 1 < l.size(); ++i) {
    if (l[i] == "dinput") {
      a.before_dinput.push_back(i > 0 ? l[i - 1] : "");
      a.after_dinput.push_back(l[i + 1]);
    }
    if (l[i] == "dweight") a.after_dweight.push_back(l[i + 1]);
  }
  return a;
}

// linear.cpp's column_backward posts the input gradient's collective (under SP also the input's
// re-gather) before a GEMM and waits on it after: the item stands at the wait, where the ranks
// meet (a posted call progresses only inside MPI calls, none of which the GEMM makes). Without
// overlap (--no-overlap) each call is blocking where it is issued.
TEST(Predict, TensorParallelCollectivesStandAtTheirWait) {
  const Around ov = around(backward_labels(false, true)), no = around(backward_labels(false, false));
  ASSERT_GE(ov.after_dinput.size(), 3u);  // the blocks' QKV and fc, and the LM head
  EXPECT_EQ(ov.after_dinput.size(), no.after_dinput.size());
  for (size_t i = 0; i < ov.after_dinput.size(); ++i) {
    EXPECT_EQ(ov.after_dinput[i], "dweight") << i;
    EXPECT_EQ(ov.after_dweight[i], "all_reduce") << i;
    EXPECT_EQ(no.after_dinput[i], "all_reduce") << i;
  }
  const Around sp = around(backward_labels(true, true)), sp_no = around(backward_labels(true, false));
  ASSERT_GE(sp.after_dinput.size(), 3u);
  EXPECT_EQ(sp.after_dinput.size(), sp_no.after_dinput.size());
  for (size_t i = 0; i < sp.after_dinput.size(); ++i) {
    EXPECT_EQ(sp.after_dinput[i], "all_gather") << i;        // the re-gather's wait
    EXPECT_EQ(sp.after_dweight[i], "reduce_scatter") << i;  // the input gradient's wait
    EXPECT_EQ(sp_no.before_dinput[i], "all_gather") << i;
    EXPECT_EQ(sp_no.after_dinput[i], "reduce_scatter") << i;
  }
}

// ZeRO-3's dp calls of one pass, in order: 'G' a gather, 'R' a reduce-scatter, lower case where
// the item is overlapped (the polls complete it, no meeting).
std::string zero3_calls(bool overlap, int prefetch, char phase, bool last_micro) {
  Plan p;
  p.mesh_text = "dp=2";
  p.mesh = comm::parse_mesh(p.mesh_text);
  p.zero = 3;
  p.overlap = overlap;
  p.prefetch = prefetch;
  p.micro_batches = 2;
  resolve_and_validate(p, 2);
  std::string out;
  for (const PassItem& it : pass_items(p, 0, 0, phase, false, last_micro))
    if (it.comm && it.dim == "dp") {
      const char c = it.collective == "all_gather" ? 'G' : it.collective == "reduce_scatter" ? 'R' : '?';
      out += it.overlapped ? char(c - 'A' + 'a') : c;
    }
  return out;
}

// zero.cpp: a pass's first gather is posted and waited on at once (a meeting); the prefetch posts
// the others a unit ahead and the polls between ops complete them. The reduce-scatters are posted
// after each unit's backward and completed by the polls, but for the step's last, waited on at
// the gradient sync. Without prefetch every gather waits at once; without overlap every
// reduce-scatter does.
TEST(Predict, ZeroThreeMeetsAtEachPassesFirstGatherAndTheLastReduceScatter) {
  const std::string fwd = zero3_calls(true, 1, 'F', false);
  ASSERT_GE(fwd.size(), 3u);  // the embedding, the blocks, the head
  EXPECT_EQ(fwd, "G" + std::string(fwd.size() - 1, 'g'));
  const std::string bwd = zero3_calls(true, 1, 'B', false), bwd_last = zero3_calls(true, 1, 'B', true);
  EXPECT_EQ(bwd.front(), 'G');
  EXPECT_EQ(bwd.find('R'), std::string::npos) << bwd;  // every reduce-scatter polled
  EXPECT_EQ(bwd.find('G', 1), std::string::npos) << bwd;
  ASSERT_EQ(bwd_last.size(), bwd.size());
  EXPECT_EQ(bwd_last.back(), 'R') << bwd_last;  // the step's last: waited on at the sync
  EXPECT_EQ(bwd_last.substr(0, bwd_last.size() - 1), bwd.substr(0, bwd.size() - 1));
  EXPECT_EQ(zero3_calls(true, 0, 'F', false), std::string(fwd.size(), 'G'));  // no prefetch
  const std::string no = zero3_calls(false, 1, 'B', false);
  EXPECT_EQ(no.find('r'), std::string::npos) << no;  // --no-overlap: each waited on at once
  EXPECT_NE(no.find('R'), std::string::npos) << no;
}

}  // namespace
}  // namespace meshbench::parallel
