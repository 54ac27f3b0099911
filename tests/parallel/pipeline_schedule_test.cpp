// The pipeline schedules as data (issue 11): golden action tables for GPipe, 1F1B and
// interleaved 1F1B (Megatron-LM's PP=2, V=2, G=3, m=5 example among them), the warm-up
// rule, the shape rules, and a simulation of every rank's list with blocking receives and
// non-blocking sends that proves the lists match up (every receive finds its send) and run
// to the end without a deadlock, with the stored-activation peak GPipe m, 1F1B min(P-r, m).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "pipeline_parallel/schedule.hpp"

using namespace meshbench::parallel;

namespace {
PipeShape shape(int P, int m, int V = 1, int G = 0) { return PipeShape{P, m, V, G}; }

// Runs all ranks' lists: a receive waits for the matching send (same micro-batch, the
// boundary between the two virtual stages, same direction); sends never wait. Returns the
// peak of stored activations per rank (+1 at a forward, -1 at its backward), or an empty
// vector on a deadlock.
std::vector<int> simulate(PipeSchedule kind, const PipeShape& s) {
  const int P = s.stages;
  std::vector<std::vector<Action>> lists;
  for (int r = 0; r < P; ++r) lists.push_back(pipeline_schedule(kind, s, r));
  std::vector<size_t> pc(static_cast<size_t>(P), 0);
  std::vector<int> held(static_cast<size_t>(P), 0), peak(static_cast<size_t>(P), 0);
  // (direction, micro, receiving virtual stage) of the messages sent so far
  std::set<std::tuple<int, int, int>> sent;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      auto& i = pc[static_cast<size_t>(r)];
      while (i < lists[static_cast<size_t>(r)].size()) {
        const Action& a = lists[static_cast<size_t>(r)][i];
        const int vs = a.chunk * P + r;
        if (a.kind == ActionKind::kRecvActivation && !sent.count({0, a.micro, vs})) break;
        if (a.kind == ActionKind::kRecvGradient && !sent.count({1, a.micro, vs})) break;
        if (a.kind == ActionKind::kSendActivation) {
          EXPECT_EQ(a.peer, (r + 1) % P);
          sent.insert({0, a.micro, vs + 1});
        }
        if (a.kind == ActionKind::kSendGradient) {
          EXPECT_EQ(a.peer, (r + P - 1) % P);
          sent.insert({1, a.micro, vs - 1});
        }
        if (a.kind == ActionKind::kForward) peak[static_cast<size_t>(r)] = std::max(peak[static_cast<size_t>(r)], ++held[static_cast<size_t>(r)]);
        if (a.kind == ActionKind::kBackward) --held[static_cast<size_t>(r)];
        ++i;
        progress = true;
      }
    }
  }
  for (int r = 0; r < P; ++r)
    if (pc[static_cast<size_t>(r)] != lists[static_cast<size_t>(r)].size()) return {};
  return peak;
}
}  // namespace

TEST(PipelineSchedule, GpipeTwoStages) {
  const PipeShape s = shape(2, 3);
  EXPECT_EQ(to_string(pipeline_schedule(PipeSchedule::kGpipe, s, 0)),
            "F0 sa0 F1 sa1 F2 sa2 rg0 B0 rg1 B1 rg2 B2 G O");
  EXPECT_EQ(to_string(pipeline_schedule(PipeSchedule::kGpipe, s, 1)),
            "ra0 F0 ra1 F1 ra2 F2 B0 sg0 B1 sg1 B2 sg2 G O");
}

TEST(PipelineSchedule, OneFOneBFourStages) {
  const PipeShape s = shape(4, 6);
  // warm-up min(P - r - 1, m): 3, 2, 1, 0
  EXPECT_EQ(compute_order(pipeline_schedule(PipeSchedule::k1F1B, s, 0)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(compute_order(pipeline_schedule(PipeSchedule::k1F1B, s, 1)),
            "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(compute_order(pipeline_schedule(PipeSchedule::k1F1B, s, 3)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  EXPECT_EQ(to_string(pipeline_schedule(PipeSchedule::k1F1B, shape(4, 2), 1)),
            "ra0 F0 sa0 ra1 F1 sa1 rg0 B0 sg0 rg1 B1 sg1 G O");
  for (int r = 0; r < 4; ++r) EXPECT_EQ(warmup_forwards(PipeSchedule::k1F1B, shape(4, 2), r), std::min(3 - r, 2));
}

TEST(PipelineSchedule, MegatronInterleavedExample) {
  // Megatron-LM's PP=2, V=2, microbatch_group_size_per_vp_stage=3, m=5 table.
  const auto t = interleaved_table(5, 2, 3);
  std::vector<int> micro, chunk;
  for (auto [i, c] : t) {
    micro.push_back(i);
    chunk.push_back(c);
  }
  EXPECT_EQ(micro, (std::vector<int>{0, 1, 2, 0, 1, 2, 3, 4, 3, 4}));
  EXPECT_EQ(chunk, (std::vector<int>{0, 0, 0, 1, 1, 1, 0, 0, 1, 1}));
  const PipeShape s = shape(2, 5, 2, 3);
  EXPECT_EQ(warmup_forwards(PipeSchedule::kInterleaved, s, 0), 5);  // 2(P-r-1) + (V-1)G
  EXPECT_EQ(warmup_forwards(PipeSchedule::kInterleaved, s, 1), 3);
  EXPECT_EQ(compute_order(pipeline_schedule(PipeSchedule::kInterleaved, s, 0)),
            "F0 F1 F2 F0c1 F1c1 F2c1 B0c1 F3 B1c1 F4 B2c1 F3c1 B0 F4c1 B1 B2 B3c1 B4c1 B3 B4");
  EXPECT_EQ(compute_order(pipeline_schedule(PipeSchedule::kInterleaved, s, 1)),
            "F0 F1 F2 F0c1 B0c1 F1c1 B1c1 F2c1 B2c1 F3 B0 F4 B1 F3c1 B2 F4c1 B3c1 B4c1 B3 B4");
  // Rank 1 chunk 0 sends to rank 0 chunk 1 (the wrap); rank 0 chunk 0 receives nothing.
  const auto r1 = pipeline_schedule(PipeSchedule::kInterleaved, s, 1);
  EXPECT_EQ(to_string({r1.begin(), r1.begin() + 9}), "ra0 F0 sa0 ra1 F1 sa1 ra2 F2 sa2");
}

TEST(PipelineSchedule, ListsMatchAndRunWithoutDeadlock) {
  for (int P : {2, 3, 4})
    for (int m : {1, 2, 3, 4, 8}) {
      for (PipeSchedule k : {PipeSchedule::kGpipe, PipeSchedule::k1F1B}) {
        const auto peak = simulate(k, shape(P, m));
        ASSERT_EQ(peak.size(), static_cast<size_t>(P)) << name(k) << " P=" << P << " m=" << m;
        for (int r = 0; r < P; ++r)
          EXPECT_EQ(peak[static_cast<size_t>(r)], k == PipeSchedule::kGpipe ? m : std::min(P - r, m))
              << name(k) << " P=" << P << " m=" << m << " r=" << r;
      }
      for (int V : {2, 3})
        for (int G = P; G <= m; ++G) {
          const PipeShape s = shape(P, m, V, G);
          if (!pipeline_rule_broken(PipeSchedule::kInterleaved, s).empty()) continue;
          EXPECT_EQ(simulate(PipeSchedule::kInterleaved, s).size(), static_cast<size_t>(P))
              << "interleaved P=" << P << " m=" << m << " V=" << V << " G=" << G;
        }
    }
}

TEST(PipelineSchedule, ScheduledActivationPeak) {
  EXPECT_EQ(scheduled_activation_peak(pipeline_schedule(PipeSchedule::kGpipe, shape(2, 8), 0), {10}), 80);
  EXPECT_EQ(scheduled_activation_peak(pipeline_schedule(PipeSchedule::k1F1B, shape(2, 8), 0), {10}), 20);
  EXPECT_EQ(scheduled_activation_peak(pipeline_schedule(PipeSchedule::k1F1B, shape(2, 8), 1), {10}), 10);
  // interleaved P=2 V=2 m=4 (G=2) on rank 0: warm-up 2 + 2 = 4 forwards (micro-batches 0, 1
  // on chunk 0, then on chunk 1), then micro-batch 2 on chunk 0 before the first backward
  EXPECT_EQ(scheduled_activation_peak(pipeline_schedule(PipeSchedule::kInterleaved, shape(2, 4, 2), 0), {1, 100}), 203);
}

TEST(PipelineSchedule, ShapeRules) {
  EXPECT_EQ(pipeline_rule_broken(PipeSchedule::k1F1B, shape(2, 4)), "");
  EXPECT_NE(pipeline_rule_broken(PipeSchedule::k1F1B, shape(2, 0)).find("at least 1"), std::string::npos);
  EXPECT_NE(pipeline_rule_broken(PipeSchedule::k1F1B, shape(2, 4, 2)).find("interleaved"), std::string::npos);
  EXPECT_NE(pipeline_rule_broken(PipeSchedule::kInterleaved, shape(1, 4, 2)).find("P >= 2"), std::string::npos);
  EXPECT_EQ(pipeline_rule_broken(PipeSchedule::kInterleaved, shape(2, 5, 2, 3)), "");  // m % G = 2 >= P
  EXPECT_NE(pipeline_rule_broken(PipeSchedule::kInterleaved, shape(4, 3, 2)).find("P <= G <= m"), std::string::npos);
  EXPECT_NE(pipeline_rule_broken(PipeSchedule::kInterleaved, shape(2, 7, 2, 3)).find("m % G = 1"), std::string::npos);
  EXPECT_EQ(pipeline_rule_broken(PipeSchedule::kInterleaved, shape(2, 4, 2)), "");  // G = P = 2
}
