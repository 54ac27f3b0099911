// The pipeline schedules as data (issue 11): golden action tables for GPipe, 1F1B and
// interleaved 1F1B (Megatron-LM's PP=2, V=2, G=3, m=5 example among them), the warm-up
// rule, the shape rules, and a simulation of every rank's list with blocking receives and
// non-blocking sends that proves the lists match up (every receive finds its send) and run
// to the end without a deadlock, with the stored-activation peak GPipe m, 1F1B min(P-r, m).
#include <gtest/gtest.h>

#include <algorithm>

#include <map>
#include <set>
#include <tuple>

#include "pipeline_parallel/schedule.hpp"
#include "pipeline_parallel/walk.hpp"

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

namespace {
// NCCL's point-to-point semantics (issue 30, defect 3), as PipeExchange posts a schedule: each
// run of consecutive sends and receives in a rank's list is one NCCL group (ncclGroupStart ...
// ncclGroupEnd) on the communicator's one stream, groups run in posting order, and a group
// completes when each of its ops has met its partner in the group at the head of the peer's
// stream (a rendezvous: messages larger than NCCL's buffers). NCCL pairs the n-th send from r
// to q with q's n-th receive from r, so they must carry the same message. The host blocks
// after posting a group until its receives complete, waits for an activation send before the
// backward of that micro-batch, and for every send at the gradient sync. `grouped` false:
// every op its own group (single ungrouped ncclSend/ncclRecv, the defect). Returns "" when
// every rank runs to its end with every pair matched, else why not.
struct NcclOp {
  bool send;
  int peer, micro, vs;  // vs: the receiving virtual stage (the message's identity)
  bool done = false;
};
using NcclGroup = std::vector<NcclOp>;

bool group_done(const NcclGroup& g) {
  return std::all_of(g.begin(), g.end(), [](const NcclOp& o) { return o.done; });
}

struct NcclSim {
  int P;
  bool grouped;
  std::vector<std::vector<Action>> lists;
  std::vector<std::vector<NcclGroup>> stream;
  std::vector<size_t> head, pc;

  NcclSim(PipeSchedule kind, const PipeShape& s, bool g)
      : P(s.stages), grouped(g), stream(size_t(s.stages)), head(size_t(s.stages), 0), pc(size_t(s.stages), 0) {
    for (int r = 0; r < P; ++r) lists.push_back(pipeline_schedule(kind, s, r));
  }

  // The streams: pair the ops of the head groups, then retire the groups done. "" or why not.
  std::string streams(bool& progress) {
    for (int r = 0; r < P; ++r) {
      if (head[size_t(r)] >= stream[size_t(r)].size()) continue;
      for (NcclOp& a : stream[size_t(r)][head[size_t(r)]]) {
        if (a.done) continue;
        const size_t hq = head[size_t(a.peer)];
        if (hq >= stream[size_t(a.peer)].size()) continue;
        for (NcclOp& b : stream[size_t(a.peer)][hq])
          if (!b.done && b.peer == r && b.send != a.send) {
            if (a.micro != b.micro || a.vs != b.vs)
              return "rank " + std::to_string(r) + "'s op pairs with another message at rank " + std::to_string(a.peer);
            a.done = b.done = true;
            progress = true;
            break;
          }
      }
    }
    for (int r = 0; r < P; ++r)
      while (head[size_t(r)] < stream[size_t(r)].size() && group_done(stream[size_t(r)][head[size_t(r)]])) {
        ++head[size_t(r)];
        progress = true;
      }
    return "";
  }

  // Rank r's host: posts a run of point-to-point ops as one group (or each alone), then waits
  // before compute for what the compute needs.
  void host(int r, bool& progress) {
    auto& i = pc[size_t(r)];
    const auto& list = lists[size_t(r)];
    while (i < list.size()) {
      const Action& a = list[i];
      if (is_send(a.kind) || is_recv(a.kind)) {  // post the run (or one op), then wait for its receives
        size_t end = i + 1;
        while (grouped && end < list.size() && (is_send(list[end].kind) || is_recv(list[end].kind))) ++end;
        NcclGroup g;
        for (size_t j = i; j < end; ++j) {
          const Action& x = list[j];
          const int vs = x.chunk * P + r;
          const int to_vs = x.kind == ActionKind::kSendActivation ? vs + 1 : x.kind == ActionKind::kSendGradient ? vs - 1 : vs;
          g.push_back({is_send(x.kind), x.peer, x.micro, to_vs});
        }
        stream[size_t(r)].push_back(g);
        i = end;
        progress = true;
        return;  // the host continues once the group's receives are done (next round)
      }
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kGradSync || a.kind == ActionKind::kForward) {
        // before compute: every posted receive done; before a backward its activation send
        // done; at the gradient sync every op done
        bool wait = false;
        for (const NcclGroup& g : stream[size_t(r)])
          for (const NcclOp& o : g)
            wait = wait || (!o.done && (!o.send || a.kind == ActionKind::kGradSync ||
                                        (a.kind == ActionKind::kBackward && o.micro == a.micro &&
                                         o.vs == a.chunk * P + r + 1)));
        if (wait) return;
      }
      ++i;
      progress = true;
    }
  }
};

std::string simulate_nccl(PipeSchedule kind, const PipeShape& s, bool grouped) {
  NcclSim sim(kind, s, grouped);
  for (bool progress = true; progress;) {
    progress = false;
    if (std::string e = sim.streams(progress); !e.empty()) return e;
    for (int r = 0; r < sim.P; ++r) sim.host(r, progress);
  }
  for (int r = 0; r < sim.P; ++r)
    if (sim.pc[size_t(r)] != sim.lists[size_t(r)].size() || sim.head[size_t(r)] != sim.stream[size_t(r)].size())
      return "deadlock: rank " + std::to_string(r) + " stops at action " + std::to_string(sim.pc[size_t(r)]);
  return "";
}
}  // namespace

// Grouping each send-then-receive of a list into one NCCL group (PipeExchange::
// send_then_recv) runs GPipe and 1F1B without a deadlock, every send paired with its own
// receive; single ungrouped ops on one stream deadlock 1F1B (the defect). The interleaved
// lists still deadlock under these semantics in some shapes (their receives are posted too
// late for NCCL's in-order pairing), which is why the plan refuses --schedule interleaved
// with --backend nccl (step_bad_plans).
TEST(PipelineSchedule, NcclGroupedExchangesRunGpipeAnd1F1B) {
  EXPECT_NE(simulate_nccl(PipeSchedule::k1F1B, shape(2, 4), false), "") << "ungrouped: 1F1B should deadlock";
  int interleaved_deadlocks = 0;
  for (int P : {2, 3, 4})
    for (int m : {1, 2, 3, 4, 8}) {
      for (PipeSchedule k : {PipeSchedule::kGpipe, PipeSchedule::k1F1B})
        EXPECT_EQ(simulate_nccl(k, shape(P, m), true), "") << name(k) << " P=" << P << " m=" << m;
      for (int V : {2, 3})
        for (int G = P; G <= m; ++G) {
          const PipeShape s = shape(P, m, V, G);
          if (!pipeline_rule_broken(PipeSchedule::kInterleaved, s).empty()) continue;
          interleaved_deadlocks += simulate_nccl(PipeSchedule::kInterleaved, s, true).empty() ? 0 : 1;
        }
    }
  EXPECT_GT(interleaved_deadlocks, 0) << "interleaved runs under NCCL's pairing: lift the plan's refusal";
}
