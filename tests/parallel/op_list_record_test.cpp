// The step model's pass items as read off the model (predict/pass_record.cpp over
// kernels/backend_shape.hpp): their FLOPs against the engine's step count, the busiest expert
// rank's rows under a skewed routing and capacity, expert tensor parallel's calls, and a 405B
// plan recorded without committing its tensors. tests/mpi/predict_op_list.sh compares the same
// lists with profiled runs' events.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/mesh.hpp"
#include "core/routing.hpp"
#include "kernels/backend_emulated.hpp"
#include "kernels/backend_shape.hpp"
#include "kernels/flops.hpp"
#include "model/model.hpp"
#include "predict/op_list.hpp"
#include "step/rules.hpp"

namespace meshbench::parallel {
namespace {

Plan make(const std::string& mesh, int world, void (*set)(Plan&) = nullptr) {
  Plan p;
  p.mesh_text = mesh;
  p.mesh = comm::parse_mesh(p.mesh_text);
  if (set) set(p);
  resolve_and_validate(p, world);
  return p;
}

// GEMM and attention FLOPs of one step of pipeline rank r (step_op_list: every action's pass).
double step_compute_flops(const Plan& p, int r) {
  double f = 0;
  for (const OpTotal& o : step_op_list(p, r))
    if ((o.op == Op::kMatmul || o.op == Op::kAttention) && (o.phase == 'F' || o.phase == 'B') && o.part != "rowdot")
      f += o.units;
  return f;
}

TEST(OpListRecord, FlopsAreTheEnginesStepCount) {
  // one rank, m=2: twice step_flops; tp=2: half of it on each rank; pp=2: the ranks' sum; ep=2
  // under balanced routing: each rank a replica's
  const Plan one = make("dp=1", 1, [](Plan& p) { p.micro_batches = 2; });
  const double want = step_flops(one.model).total();
  EXPECT_NEAR(step_compute_flops(one, 0), 2 * want, 1e-9 * want);
  const Plan tp = make("tp=2", 2);
  EXPECT_NEAR(step_compute_flops(tp, 0), want / 2, 1e-9 * want);
  const Plan pp = make("pp=2", 2, [](Plan& p) { p.micro_batches = 4, p.model.layers = 4; });
  const double pp_want = 4 * step_flops(pp.model).total();
  EXPECT_NEAR(step_compute_flops(pp, 0) + step_compute_flops(pp, 1), pp_want, 1e-9 * pp_want);
  const Plan ep = make("ep=2", 2, [](Plan& p) { p.model.experts = 4, p.routing.mode = core::RoutingMode::kBalanced; });
  const double ep_want = step_flops(ep.model).total();
  EXPECT_NEAR(step_compute_flops(ep, 0), ep_want, 1e-9 * ep_want);
}

// The rows of each expert GEMM ("expert.fc.fwd") of the first MoE block's forward, and the
// idle share on them.
struct ExpertRows {
  std::vector<int> rows;
  double idle = 0;
};
ExpertRows expert_rows(const Plan& p) {
  ExpertRows e;
  for (const PassItem& it : pass_items(p, 0, 0, 'F', true, true)) {
    if (it.comm && it.collective == "all_to_allv" && !e.rows.empty()) break;
    if (!it.comm && it.part == "expert.fc.fwd") e.rows.push_back(it.m), e.idle = it.idle;
  }
  return e;
}

TEST(OpListRecord, BusiestExpertRankUnderSkewAndCapacity) {
  // tiny's micro-batch: N = 4 x 64 = 256 tokens per EP rank, k = 1 of E = 4. Hot-expert: 128
  // to expert 0, 128 over experts 1..3 (43, 43, 42); EP rank 0 holds experts 0, 1 and receives
  // as much from the other rank: 256 and 86 rows; the mean rank's 256 rows leave it idle
  // 1 - 256/342 of the experts' time.
  auto hot = [](Plan& p) {
    p.model.experts = 4, p.model.top_k = 1, p.routing.mode = core::RoutingMode::kHotExpert;
  };
  const ExpertRows h = expert_rows(make("ep=2", 2, hot));
  EXPECT_EQ(h.rows, (std::vector<int>{256, 86}));
  EXPECT_NEAR(h.idle, 1.0 - 256.0 / 342.0, 1e-12);
  // capacity factor 1: ceil(256 x 1 / 4) = 64 rows per expert and token holder
  const ExpertRows c = expert_rows(make("ep=2", 2, [](Plan& p) {
    p.model.experts = 4, p.model.top_k = 1, p.model.capacity_factor = 1.0, p.routing.mode = core::RoutingMode::kHotExpert;
  }));
  EXPECT_EQ(c.rows, (std::vector<int>{128, 86}));
  // balanced: 64 each, no idle
  const ExpertRows b = expert_rows(make("ep=2", 2, [](Plan& p) {
    p.model.experts = 4, p.model.top_k = 1, p.routing.mode = core::RoutingMode::kBalanced;
  }));
  EXPECT_EQ(b.rows, (std::vector<int>{128, 128}));
  EXPECT_EQ(b.idle, 0.0);
}

TEST(OpListRecord, ExpertTensorParallelCallsAreListed) {
  // ep=2, etp=2: per MoE block forward, the etp group gathers the counts and the rows and
  // reduce-scatters the outputs (moe.cpp plan_runs, forward)
  const Plan p = make("ep=2,etp=2", 4, [](Plan& q) { q.model.experts = 4; });
  int gathers = 0, scatters = 0;
  for (const PassItem& it : pass_items(p, 0, 0, 'F', true, true)) {
    if (!it.comm || it.dim != "etp") continue;
    EXPECT_EQ(it.group, 2);
    gathers += it.collective == "all_gather";
    scatters += it.collective == "reduce_scatter";
  }
  EXPECT_EQ(gathers, 2 * p.model.moe_blocks());
  EXPECT_EQ(scatters, p.model.moe_blocks());
}

// A one-rank step of the model itself over `be` (weights initialised, random tokens, MoE blocks
// on balanced routing), traced: its ops in order against the list's compute items (kind, part,
// phase, GEMM shape, and the FLOPs of the GEMMs and attention).
void expect_trace_is_the_list(const Plan& p, Backend<float>& be, const std::string& name) {
  Gpt<float> m(p.model, be, plan_rank_options(p, 0));
  m.init_weights(3);
  const int64_t N = p.model.tokens();
  if (p.model.experts > 0)
    m.moe().set_assignment([&](int layer, const int32_t*, int step, int32_t* idx) {
      const core::RoutingShape s{11u + unsigned(layer), step, 0, size_t(N), p.model.experts, p.model.top_k, 1};
      const std::vector<int> a = core::assign_experts(core::Routing{core::RoutingMode::kBalanced, 0}, s);
      std::copy(a.begin(), a.end(), idx);
    });
  std::vector<int32_t> tok(static_cast<size_t>(N)), tgt(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) tok[size_t(i)] = int32_t((i * 7 + 3) % p.model.vocab), tgt[size_t(i)] = int32_t((i * 5 + 1) % p.model.vocab);
  std::vector<OpEvent> ev;
  m.set_trace(&ev, 0, 0);
  m.zero_grad();
  m.forward(tok.data(), tgt.data());
  m.backward(1.0f, true);
  std::vector<PassItem> list;
  for (char ph : {'F', 'B'})
    for (PassItem& it : pass_items(p, 0, 0, ph, true, true))
      if (!it.comm) list.push_back(std::move(it));
  ASSERT_EQ(ev.size(), list.size()) << name;
  for (size_t i = 0; i < ev.size(); ++i) {
    const OpEvent& e = ev[i];
    const PassItem& it = list[i];
    EXPECT_TRUE(e.op == it.op && e.part == it.part && e.phase == it.phase && e.m == it.m && e.n == it.n && e.k == it.k)
        << name << " op " << i << ": the run's " << op_name(e.op) << " " << e.part << " " << e.phase << " " << e.m << "x"
        << e.n << "x" << e.k << ", the list's " << op_name(it.op) << " " << it.part << " " << it.phase << " " << it.m
        << "x" << it.n << "x" << it.k;
    if (e.flops > 0) EXPECT_DOUBLE_EQ(e.flops, it.units) << name << " op " << i;
  }
}

TEST(OpListRecord, AModelStepRunsTheListInOrder) {
  // the CPU reference and the bf16 emulation of the CUDA backend's numerics: the same wiring
  const std::vector<std::pair<std::string, void (*)(Plan&)>> plans = {
      {"dense", nullptr},
      {"flash, GQA, untied", [](Plan& p) { p.flash = true, p.model.kv_heads = 2, p.model.tied = false; }},
      {"recompute selective", [](Plan& p) { p.recompute = "selective"; }},
      {"recompute full", [](Plan& p) { p.recompute = "full"; }},
      {"MoE, balanced", [](Plan& p) { p.model.experts = 4, p.routing.mode = core::RoutingMode::kBalanced; }},
  };
  for (const auto& [name, set] : plans) {
    const Plan p = make("dp=1", 1, set);
    expect_trace_is_the_list(p, cpu_backend<float>(), name + " (cpu)");
    expect_trace_is_the_list(p, emulated_backend(Precision::kBf16), name + " (bf16 emulation)");
  }
}

TEST(ShapeBackend, KeepsOnlyTheValuesTheHostReads) {
  ShapeBackend<float> be;
  auto* a = static_cast<float*>(be.alloc(sizeof(float) * 1024));
  EXPECT_FALSE(be.holds_data(a, sizeof(float) * 1024));
  const std::vector<float> host = {1, 2, 3, 4};
  be.upload(a + 100, host.data(), sizeof(float) * 4);
  EXPECT_TRUE(be.holds_data(a + 102, sizeof(float)));
  EXPECT_TRUE(be.holds_data(a, sizeof(float) * 101));
  EXPECT_FALSE(be.holds_data(a, sizeof(float) * 100));
  EXPECT_FALSE(be.holds_data(a + 104, sizeof(float) * 10));
  be.upload(a + 104, host.data(), sizeof(float) * 2);  // adjoining: one range
  be.copy(a + 500, a + 100, 6);
  be.add(a + 500, a + 100, 6);
  std::vector<float> back(6);
  be.download(back.data(), a + 500, sizeof(float) * 6);
  EXPECT_EQ(back, (std::vector<float>{2, 4, 6, 8, 2, 4}));
  be.zero(a, sizeof(float) * 1024);
  be.download(back.data(), a + 100, sizeof(float) * 6);
  EXPECT_EQ(back, std::vector<float>(6, 0.0f));
  EXPECT_DOUBLE_EQ(be.take_elements(), 12.0);  // the copy's and the add's 6 each; upload and zero are free
  be.layernorm_forward(a, a, a, a, a, a, 8, 16);
  EXPECT_DOUBLE_EQ(be.take_elements(), 128.0);
  be.release(a);
}

TEST(ShapeBackend, RoutesTheGivenPairsToDistinctExpertsPerToken) {
  // 8 tokens, k = 2 of 4 experts: 8, 4, 3, 1 pairs; two stripes of 4 tokens see each expert alike
  ShapeBackend<float> be([](int, int, int) { return std::vector<int>{8, 4, 3, 1}; }, 2);
  const int N = 8, E = 4, k = 2;
  auto* idx = static_cast<int32_t*>(be.alloc(sizeof(int32_t) * N * k));
  be.moe_topk_forward(idx, nullptr, nullptr, nullptr, N, E, k, false);
  std::vector<int> pairs(E), first_half(E);
  for (int n = 0; n < N; ++n) {
    EXPECT_NE(idx[n * k], idx[n * k + 1]) << "token " << n;
    for (int j = 0; j < k; ++j) {
      ++pairs[size_t(idx[n * k + j])];
      if (n < N / 2) ++first_half[size_t(idx[n * k + j])];
    }
  }
  EXPECT_EQ(pairs, (std::vector<int>{8, 4, 3, 1}));
  EXPECT_EQ(first_half[0], 4);
  EXPECT_EQ(first_half[1], 2);
  EXPECT_TRUE(be.holds_data(idx, sizeof(int32_t)));
  be.release(idx);
}

int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * 4096;
}

TEST(OpListRecord, A405bPlanIsRecordedWithoutItsTensors) {
  // llama3-405b, tp=8 pp=16: a stage holds ~8 layers of 1/8 of the weights (~3 GB of fp32
  // parameters, as much again for gradients and each moment) that the shape backend reserves
  // and never touches
  const Plan p = make("tp=8,pp=16", 128, [](Plan& q) {
    q.model = preset("llama3-405b");
    q.model.micro_batch = 1;
    q.micro_batches = 16;
    q.layers_per_stage.assign(16, 8);  // 126 layers: 14 stages of 8, the last two of 7
    q.layers_per_stage[14] = q.layers_per_stage[15] = 7;
    q.sp = true;
    q.flash = true;
    q.allocates = false;
  });
  const int64_t before = resident_bytes();
  const std::vector<PassItem> b = pass_items(p, 0, 0, 'B', false, true);
  EXPECT_LT(resident_bytes() - before, int64_t{256} << 20);
  int qkv = 0;
  for (const PassItem& it : b)
    if (!it.comm && it.op == Op::kMatmul && it.part == "dinput" && it.n == p.model.qkv_width() / 8) ++qkv;
  EXPECT_GT(qkv, 0);  // the qkv projection's input gradient, its rows the sequence (SP gathered)
}

}  // namespace
}  // namespace meshbench::parallel
