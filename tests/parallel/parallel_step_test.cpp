// The parallel step's pieces without MPI: the plan's rules, the bucket rule, the schedule,
// the metrics' interval arithmetic and per-call bytes, the gradient-ready hooks, and the
// CPU backend's ops through the Backend interface against the float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/backend.hpp"
#include "core/error.hpp"
#include "metrics/metrics.hpp"
#include "model/model.hpp"
#include "common/plan.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "common/trace.hpp"
#include "data_parallel/data_parallel.hpp"
#include "pipeline_parallel/plan.hpp"
#include "step/rules.hpp"

using namespace meshbench::parallel;
using meshbench::comm::Collective;
using meshbench::core::UsageError;

namespace {
Plan plan_for(const std::string& mesh, int world, int m = 1) {
  Plan p;
  p.mesh_text = mesh;
  p.mesh = meshbench::comm::parse_mesh(mesh);
  p.micro_batches = m;
  resolve_and_validate(p, world);
  return p;
}
std::string usage_message(const std::string& mesh, int world, int m = 1) {
  try {
    plan_for(mesh, world, m);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Plan, DegreesAndGlobalBatch) {
  Plan p = plan_for("dp=4", 4, 3);
  EXPECT_EQ(p.degrees.dp, 4);
  p.model.micro_batch = 2;
  EXPECT_EQ(p.global_batch(), 2 * 3 * 4);
  EXPECT_EQ(plan_for("", 8).degrees.dp, 8);  // dp defaults to the world size
}

TEST(Plan, RulesNameTheOption) {
  EXPECT_NE(usage_message("dp=3", 4).find("--mesh dp=3"), std::string::npos);
  EXPECT_NE(usage_message("tp=3", 3).find("--mesh tp=3: --heads 4 must be divisible by tp"), std::string::npos);
  EXPECT_NE(usage_message("cp=3", 3).find("--mesh cp=3: --seq 64 must be divisible by 6"), std::string::npos);
  EXPECT_EQ(usage_message("cp=2", 4), "");  // context parallel runs (main still expected the refusal)
  EXPECT_NE(usage_message("ep=2", 4).find("--mesh ep=2: expert parallel places experts on ranks; needs MoE blocks"),
            std::string::npos);  // a dense model
  EXPECT_EQ(usage_message("pp=2", 4), "");  // pipeline parallel runs (tests: pipeline_schedule_test)
  EXPECT_NE(usage_message("dp=2", 2, 0).find("--micro-batches 0: must be at least 1"), std::string::npos);
}

TEST(Plan, PipelineStageLayers) {
  Plan p = plan_for("pp=2", 2, 4);
  p.model.layers = 6;
  p.vpp = 1;
  EXPECT_EQ(stage_chunks(p, 0), (std::vector<std::pair<int, int>>{{0, 3}}));
  EXPECT_EQ(stage_chunks(p, 1), (std::vector<std::pair<int, int>>{{3, 6}}));
  p.vpp = 2;
  p.layers_per_stage = {2, 1, 1, 2};  // virtual stages 0..3: rank 0 holds 0 and 2, rank 1 holds 1 and 3
  EXPECT_EQ(stage_chunks(p, 0), (std::vector<std::pair<int, int>>{{0, 2}, {3, 4}}));
  EXPECT_EQ(stage_chunks(p, 1), (std::vector<std::pair<int, int>>{{2, 3}, {4, 6}}));
}

TEST(Plan, BucketRule) {
  Plan p;
  EXPECT_EQ(bucket_elements(p, 1000, 4), 16 * 1024);                // the floor
  EXPECT_EQ(bucket_elements(p, 4'000'000, 4), 1'000'000);           // a quarter
  EXPECT_EQ(bucket_elements(p, 1'000'000'000, 4), 40'000'000);      // Megatron's cap
  EXPECT_EQ(bucket_elements(p, 4'000'001, 4) % 64, 0);              // rounded to 64
  p.bucket_mb = 1;
  EXPECT_EQ(bucket_elements(p, 1'000'000'000, 4), 262144);          // 1 MiB of floats
}

TEST(Schedule, Accumulation) {
  EXPECT_EQ(to_string(accumulation_schedule(1)), "F0 B0 G O");
  EXPECT_EQ(to_string(accumulation_schedule(3)), "F0 B0 F1 B1 F2 B2 G O");
}

TEST(Metrics, UnionAndUncovered) {
  EXPECT_DOUBLE_EQ(union_length({{0, 1}, {0.5, 2}, {3, 4}}), 3.0);
  EXPECT_DOUBLE_EQ(union_length({}), 0.0);
  // comm [0, 10) with compute [1, 2) and [5, 12): uncovered [0,1) + [2,5) = 4
  EXPECT_DOUBLE_EQ(uncovered_length({{0, 10}}, {{1, 2}, {5, 12}}), 4.0);
  EXPECT_DOUBLE_EQ(uncovered_length({{0, 10}}, {}), 10.0);
  EXPECT_DOUBLE_EQ(uncovered_length({{0, 10}}, {{-1, 11}}), 0.0);
  EXPECT_DOUBLE_EQ(uncovered_length({{0, 2}, {4, 6}}, {{1, 5}}), 2.0);
}

TEST(Metrics, WireBytes) {
  EXPECT_DOUBLE_EQ(wire_bytes(Collective::kAllReduce, 1000, 4), 1500.0);
  EXPECT_DOUBLE_EQ(wire_bytes(Collective::kAllGather, 1000, 4), 750.0);
  EXPECT_DOUBLE_EQ(wire_bytes(Collective::kReduceScatter, 1000, 2), 500.0);
  EXPECT_DOUBLE_EQ(wire_bytes(Collective::kAllReduce, 1000, 1), 0.0);
}

namespace {
CommEvent call(const char* dim, Collective kind, double post, double wait, double end) {
  CommEvent c{};
  c.dim = dim;
  c.kind = kind;
  c.bytes = 100;
  c.t_post = c.t_start = post;
  c.t_wait = wait;
  c.t_posted = post;  // posting took no time
  c.t_end = end;
  c.blocking = post == wait;
  return c;
}
// step = compute + exposed + bubble + other, the identity metrics.hpp promises.
void expect_identity(const TimeSplit& s) {
  EXPECT_NEAR(s.compute + s.exposed_total() + s.bubble + s.other, s.step, 1e-12);
}
}  // namespace

// A posted all-reduce from 2 to 6 that the rank waits on from 4: the part behind the matmul
// (2..4) is overlap and costs nothing; 4..6 is exposed dp; the rest of the step is other.
TEST(Metrics, ExposedIsTheBlockedTimeOutsideCompute) {
  Trace t;
  t.step_start = {0.0};
  t.step_end = {10.0};
  t.ops.push_back({0, 0, 1, Op::kMatmul, 'B', 0, 1.0, 4.0});
  t.comms.push_back(call("dp", Collective::kAllReduce, 2.0, 4.0, 6.0));
  t.phases.push_back({0, "backward", 0.0, 4.0});
  t.phases.push_back({0, "grad_sync", 4.0, 6.0});
  const RankMetrics m = rank_metrics(t, 3, 0.0, {});
  ASSERT_EQ(m.comm.size(), 1u);
  EXPECT_EQ(m.comm[0].rank, 3);
  EXPECT_EQ(m.comm[0].calls, 1u);
  EXPECT_DOUBLE_EQ(m.comm[0].busy_s, 4.0);
  EXPECT_DOUBLE_EQ(m.comm[0].exposed_s, 2.0);
  EXPECT_DOUBLE_EQ(m.step_time[0], 10.0);
  EXPECT_DOUBLE_EQ(m.phases[0][2], 2.0);
  EXPECT_DOUBLE_EQ(m.split.step, 10.0);
  EXPECT_DOUBLE_EQ(m.split.compute, 3.0);
  EXPECT_DOUBLE_EQ(m.split.exposed.at("dp"), 2.0);
  EXPECT_DOUBLE_EQ(m.split.bubble, 0.0);
  EXPECT_DOUBLE_EQ(m.split.other, 5.0);
  expect_identity(m.split);
}

// Two dimensions blocked at once (4..6: dp and embedding) share the interval: 1 s each, never
// 2 s each; a posted call a test() found complete (t_wait = t_end) costs nothing.
TEST(Metrics, OverlappingDimensionsSplitTheInterval) {
  Trace t;
  t.step_start = {0.0};
  t.step_end = {8.0};
  t.ops.push_back({0, 0, 0, Op::kMatmul, 'F', 0, 0.0, 2.0});
  t.comms.push_back(call("dp", Collective::kReduceScatter, 1.0, 4.0, 6.0));
  t.comms.push_back(call("embedding", Collective::kAllReduce, 4.0, 4.0, 7.0));
  t.comms.push_back(call("tp", Collective::kAllGather, 1.0, 3.0, 3.0));
  const RankMetrics m = rank_metrics(t, 0, 0.0, {});
  EXPECT_DOUBLE_EQ(m.split.exposed.at("dp"), 1.0);
  EXPECT_DOUBLE_EQ(m.split.exposed.at("embedding"), 2.0);  // 1 shared + 6..7 alone
  EXPECT_EQ(m.split.exposed.count("tp"), 0u);
  EXPECT_DOUBLE_EQ(m.split.other, 3.0);  // 2..4 and 7..8
  expect_identity(m.split);
  double exposed_rows = 0;
  for (const CommRow& r : m.comm) exposed_rows += r.exposed_s;
  EXPECT_DOUBLE_EQ(exposed_rows, m.split.exposed_total());  // the rows are the split's, by kind
}

// A pipeline receive blocked from 1 to 5 whose sender posted at 4 (on the common clock; this
// rank's clock runs 0.5 s ahead): 1..4.5 waits for the other stage (bubble), 4.5..5 is the
// transfer (exposed pp).
TEST(Metrics, PipelineWaitIsBubbleTransferIsCommunication) {
  Trace t;
  t.step_start = {0.0};
  t.step_end = {6.0};
  CommEvent r = call("pp", Collective::kSendRecv, 1.0, 1.0, 5.0);
  r.p2p = 'r';
  r.group = 0;
  r.tag = 7;
  r.blocking = false;
  t.comms.push_back(r);
  const double offset = 0.5;  // local - common
  const std::vector<P2pPost> posts = {{0, 0, 7, 's', 4.0}};
  const RankMetrics m = rank_metrics(t, 1, offset, posts);
  EXPECT_DOUBLE_EQ(m.split.bubble, 3.5);
  EXPECT_DOUBLE_EQ(m.split.exposed.at("pp"), 0.5);
  EXPECT_DOUBLE_EQ(m.split.other, 2.0);
  expect_identity(m.split);
  const PipelineRow p = pipeline_row(t, 1, offset, m.split, posts, 0.25);
  EXPECT_DOUBLE_EQ(p.bubble, 3.5 / 6.0);
  EXPECT_DOUBLE_EQ(p.recv_wait_s, 3.5);
  EXPECT_DOUBLE_EQ(p.recv_transfer_s, 0.5);
}

// The backward reports every range of the flat gradient array once, from the end of the
// layout to its start, so buckets cut from the end become ready in order.
TEST(Hooks, GradientRangesCoverTheLayoutInReverse) {
  for (bool tied : {true, false}) {
    GptConfig c = preset("tiny");
    c.layers = 3;
    c.tied = tied;
    Gpt<float> m(c);
    m.init_weights(1);
    std::vector<std::pair<int64_t, int64_t>> seen;
    BackwardHooks h;
    h.grads_ready = [&](int64_t lo, int64_t hi, int) { seen.emplace_back(lo, hi); };
    m.set_hooks(h);
    std::vector<int32_t> tok(static_cast<size_t>(c.tokens()), 1), tgt(tok.size(), 2);
    m.zero_grad();
    m.forward(tok.data(), tgt.data());
    m.backward();
    ASSERT_EQ(seen.size(), static_cast<size_t>(c.layers) + 2);  // head (with lnf), blocks, embed
    EXPECT_EQ(seen.front().second, m.layout().find("lm_head.bias").offset + c.vocab);
    EXPECT_EQ(seen.back().first, 0);
    for (size_t i = 1; i < seen.size(); ++i) {
      EXPECT_LE(seen[i].second, seen[i - 1].first) << i;  // strictly descending
      EXPECT_GE(seen[i].second + 16, seen[i - 1].first) << i;  // gaps only the 16-element alignment
    }
  }
}

// The CPU backend's ops through the interface, float32 against float64.
TEST(CpuBackend, OpsMatchFloat64) {
  Backend<float>& f = cpu_backend<float>();
  Backend<double>& d = cpu_backend<double>();
  std::mt19937 g(7);
  std::normal_distribution<double> nd(0, 1);
  const int B = 2, T = 9, NH = 4, KVH = 2, hs = 8, C = NH * hs, QKV = (NH + 2 * KVH) * hs, N = B * T;
  auto rnd = [&](size_t n) {
    std::vector<double> v(n);
    for (auto& x : v) x = nd(g);
    return v;
  };
  auto as_f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  auto rel = [](const std::vector<float>& a, const std::vector<double>& r) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num += (a[i] - r[i]) * (a[i] - r[i]);
      den += r[i] * r[i];
    }
    return std::sqrt(num / den);
  };
  const std::vector<double> qkv = rnd(size_t(N) * QKV), dy = rnd(size_t(N) * C);
  std::vector<double> out(size_t(N) * C), att(size_t(B) * NH * T * T), datt(att.size()), dqkv(qkv.size());
  d.attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, hs);
  d.attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, T, NH, KVH, hs);
  std::vector<float> qkv_f = as_f(qkv), dy_f = as_f(dy), out_f(out.size()), att_f(att.size()), datt_f(att.size()),
                     dqkv_f(qkv.size());
  f.attention_forward(out_f.data(), att_f.data(), qkv_f.data(), B, T, NH, KVH, hs);
  f.attention_backward(dqkv_f.data(), datt_f.data(), dy_f.data(), qkv_f.data(), att_f.data(), B, T, NH, KVH, hs);
  EXPECT_LT(rel(out_f, out), 1e-6);
  EXPECT_LT(rel(dqkv_f, dqkv), 1e-5);
  // matmul forward and backward
  const int OC = 24;
  const std::vector<double> x = rnd(size_t(N) * C), w = rnd(size_t(OC) * C), b = rnd(OC), dz = rnd(size_t(N) * OC);
  std::vector<double> z(size_t(N) * OC), dx(x.size()), dw(w.size(), 0), db(OC, 0);
  d.matmul_forward(z.data(), x.data(), w.data(), b.data(), N, C, OC, false);
  d.matmul_backward(dx.data(), dw.data(), db.data(), dz.data(), x.data(), w.data(), N, C, OC);
  std::vector<float> xf = as_f(x), wf = as_f(w), bf = as_f(b), dzf = as_f(dz), zf(z.size()), dxf(dx.size()),
                     dwf(dw.size(), 0), dbf(db.size(), 0);
  f.matmul_forward(zf.data(), xf.data(), wf.data(), bf.data(), N, C, OC, false);
  f.matmul_backward(dxf.data(), dwf.data(), dbf.data(), dzf.data(), xf.data(), wf.data(), N, C, OC);
  EXPECT_LT(rel(zf, z), 1e-6);
  EXPECT_LT(rel(dxf, dx), 1e-6);
  EXPECT_LT(rel(dwf, dw), 1e-6);
  EXPECT_LT(rel(dbf, db), 1e-6);
  // memory ops
  float* p = static_cast<float*>(f.alloc(10 * sizeof(float)));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(p[i], 0.f);
  std::vector<float> h{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, back(10);
  f.upload(p, h.data(), h.size() * sizeof(float));
  f.scale(p, 0.5, 10);
  f.download(back.data(), p, back.size() * sizeof(float));
  EXPECT_EQ(back[9], 5.f);
  f.release(p);
  EXPECT_EQ(f.mem(), meshbench::compute::MemKind::kHost);
}
