// Composed plans without MPI (issue 14, "Composition, proven"): the plan rules that pipeline
// parallel now accepts (ZeRO-1/2, MoE blocks, expert parallel) and the one it still refuses
// (ZeRO-3); the closed forms the step reports beside its measurements for them: ZeRO's
// state bytes and dp payload over a pipeline stage's own padded units, tensor parallel's
// payload under context parallel and with MoE blocks; and a stage model under expert
// parallel holding exactly its blocks' local experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/model.hpp"
#include "common/plan.hpp"
#include "tensor_parallel/plan.hpp"
#include "zero/zero.hpp"
#include "pipeline_parallel/plan.hpp"
#include "step/rules.hpp"

using namespace meshbench::parallel;
using meshbench::core::UsageError;

namespace {
GptConfig small_model(int experts = 0) {
  GptConfig c;
  c.layers = 4;
  c.hidden = 32;
  c.heads = 2;
  c.kv_heads = 2;
  c.ffn = 64;
  c.seq = 16;
  c.max_seq = 16;
  c.vocab = 64;
  c.micro_batch = 1;
  c.experts = experts;
  return c;
}

// The plan for `mesh` at `world` ranks; "" when it is valid, else the refusal's message.
std::string refusal(const std::string& mesh, int world, int zero, int experts = 0) {
  Plan p;
  p.model = small_model(experts);
  p.mesh_text = mesh;
  p.mesh = meshbench::comm::parse_mesh(mesh);
  p.zero = zero;
  p.micro_batches = 2;
  try {
    resolve_and_validate(p, world);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

uint64_t payload(const std::vector<AnalyticBytes>& rows, const std::string& kind) {
  for (const AnalyticBytes& a : rows)
    if (a.kind == kind) return a.payload;
  return 0;
}
}  // namespace

TEST(ComposedPlans, PipelineAcceptsZero12MoeAndExpertParallel) {
  EXPECT_EQ(refusal("pp=2,dp=2", 4, 1), "");
  EXPECT_EQ(refusal("pp=2,dp=2", 4, 2), "");
  EXPECT_EQ(refusal("pp=2,dp=2,cp=2", 8, 1), "");
  EXPECT_EQ(refusal("pp=2", 2, 0, 4), "");                   // MoE blocks on both stages
  EXPECT_EQ(refusal("tp=2,ep=2,pp=2,etp=1", 8, 0, 4), "");   // the expert grid with pp
  EXPECT_EQ(refusal("tp=2,pp=2,dp=2", 8, 0), "");
  EXPECT_EQ(refusal("tp=2,cp=2,pp=2,dp=2", 16, 0), "");
}

// Issue 25: the combinations Megatron, DeepSpeed and torchtitan run are plans, not refusals.
TEST(ComposedPlans, AcceptsZeroUnderEveryStrategyAndFiveD) {
  EXPECT_EQ(refusal("pp=2,dp=2", 4, 3), "");              // ZeRO-3 under a pipeline
  EXPECT_EQ(refusal("tp=2,dp=2", 4, 1), "");              // ZeRO with tensor parallel
  EXPECT_EQ(refusal("tp=2,dp=2", 4, 3), "");
  EXPECT_EQ(refusal("ep=2", 4, 1, 4), "");                // ZeRO with expert parallel
  EXPECT_EQ(refusal("cp=2", 2, 0, 4), "");                // context parallel with MoE blocks
  EXPECT_EQ(refusal("tp=2,cp=2,pp=2,dp=2,ep=2,etp=1", 16, 1, 4), "");  // 5D
}

TEST(ComposedPlans, TokenSplitMoeNeedsDroplessRouting) {
  Plan p;
  p.model = small_model(4);
  p.model.capacity_factor = 1.0;
  p.mesh_text = "cp=2";
  p.mesh = meshbench::comm::parse_mesh("cp=2");
  std::string m;
  try {
    resolve_and_validate(p, 2);
  } catch (const UsageError& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("--capacity-factor 1 with --mesh cp=2"), std::string::npos) << m;
  EXPECT_NE(m.find("--capacity-factor 0 (dropless)"), std::string::npos) << m;
}

TEST(ComposedPlans, ZeroWithExpertsShardsTheExpertsOverEdp) {
  // 1000 flat elements of which 400 are expert segments: dense state over d = 4, experts' over edp = 2
  const StateBytes z = zero_state_bytes(1000, 400, 4, 1, 4, 2);
  EXPECT_EQ(z.params, 4000);
  EXPECT_EQ(z.grads, 4000);
  EXPECT_EQ(z.optimizer, 2 * 600 * 4 / 4 + 2 * 400 * 4 / 2);
  const StateBytes z3 = zero_state_bytes(1000, 400, 4, 3, 4, 2);
  EXPECT_EQ(z3.params, 600 * 4 / 4 + 400 * 4 / 2);
  // ZeRO-3 with a held unit (a pipeline's tied wte copy): reduce-scattered once, not per micro-batch
  EXPECT_EQ(payload(zero_analytic(1000, 3, 4, 2, true, 100), "reduce_scatter"), 900u * 2 + 100);
  EXPECT_EQ(payload(zero_analytic(1000, 3, 4, 2, true, 0, "edp"), "all_gather"), 1000u);
}

TEST(ComposedPlans, ZeroStateBytesPerStage) {
  const StateBytes z0 = zero_state_bytes(1000, 4, 0, 4), z1 = zero_state_bytes(1000, 4, 1, 4),
                   z2 = zero_state_bytes(1000, 4, 2, 4), z3 = zero_state_bytes(1000, 4, 3, 4);
  EXPECT_EQ(z0.params, 4000);
  EXPECT_EQ(z0.grads, 4000);
  EXPECT_EQ(z0.optimizer, 8000);
  EXPECT_EQ(z1.params, 4000);
  EXPECT_EQ(z1.grads, 4000);
  EXPECT_EQ(z1.optimizer, 2000);
  EXPECT_EQ(z2.grads, 1000);
  EXPECT_EQ(z2.optimizer, 2000);
  EXPECT_EQ(z3.params, 1000);
}

// Each stage shards its own units: padded to 16 d, the two stages' flat arrays hold the
// whole model's parameters (plus the tied head's wte copy) and the dp payload of a stage is
// its own flat array, once reduce-scattered and once all-gathered.
TEST(ComposedPlans, ZeroOverAPipelineStagesOwnUnits) {
  const GptConfig c = small_model();
  const int d = 2;
  int64_t params = 0;
  for (int r = 0; r < 2; ++r) {
    GptOptions o = zero_model_options(1, d);
    o.stage = StageSpec{{{2 * r, 2 * r + 2}}, r == 0, r == 1, 2};
    Gpt<float> m(c, cpu_backend<float>(), o);
    for (const Unit& u : m.units()) EXPECT_EQ((u.hi - u.lo) % (16 * d), 0) << u.name;
    params += m.num_params();
    const uint64_t flat = static_cast<uint64_t>(m.layout().total()) * 4;
    const std::vector<AnalyticBytes> a = zero_analytic(flat, 1, d, 2, false);
    EXPECT_EQ(payload(a, "reduce_scatter"), flat);
    EXPECT_EQ(payload(a, "all_gather"), flat);
    EXPECT_DOUBLE_EQ(a[0].wire, 0.5 * double(flat));
    const StateBytes z = zero_state_bytes(m.layout().total(), 4, 1, d);
    EXPECT_EQ(z.optimizer, double(flat));  // 2 x 4 bytes per element over 2 ranks
  }
  const Gpt<float> whole(c);
  EXPECT_EQ(params, whole.num_params() + int64_t{c.vocab} * c.hidden);  // + the last stage's wte copy
  // ZeRO-3 (no pipeline): a reduce-scatter per micro-batch, gathers before every pass.
  EXPECT_EQ(payload(zero_analytic(1000, 3, d, 2, false), "all_gather"), 4000u);
  EXPECT_EQ(payload(zero_analytic(1000, 3, d, 2, true), "all_gather"), 1000u);
}

TEST(ComposedPlans, TensorParallelBytesUnderContextParallel) {
  Plan p;
  p.model = small_model();
  p.mesh = meshbench::comm::parse_mesh("tp=2");
  resolve_and_validate(p, 2);
  const uint64_t one = payload(tp_analytic(p, 4), "all_reduce");
  p.mesh = meshbench::comm::parse_mesh("tp=2,cp=2");
  resolve_and_validate(p, 4);
  // every tp all-reduce carries this rank's b s / cp token rows
  EXPECT_EQ(payload(tp_analytic(p, 4), "all_reduce") * 2, one);
  const uint64_t N = 16, C = 32;
  EXPECT_EQ(one, (4 * 4 + 2) * N * C * 4 + 3 * N * 4);
}

TEST(ComposedPlans, TensorParallelBytesWithMoeBlocks) {
  Plan p;
  p.model = small_model(4);
  p.model.moe_every = 2;  // blocks 0 and 2
  p.mesh = meshbench::comm::parse_mesh("tp=2,etp=1");
  resolve_and_validate(p, 2);
  const uint64_t N = 16, C = 32, act = N * C * 4, ce = 3 * N * 4;
  // replicated experts: the two MoE blocks have no fcproj / fc all-reduce pair
  EXPECT_EQ(payload(tp_analytic(p, 4), "all_reduce"), (4 * 4 - 2 * 2 + 2) * act + ce);
  // a stage of blocks 2, 3 (one MoE) without the embedding
  EXPECT_EQ(payload(tp_analytic(p, 4, 2, false, true, 1), "all_reduce"), (4 * 2 - 2 + 1) * act + ce);
  p.mesh = meshbench::comm::parse_mesh("tp=2,etp=1,ep=2");
  resolve_and_validate(p, 4);
  // expert parallel: each tp rank's token slice; output and d(x) all-reduced, + d(gates)
  EXPECT_EQ(payload(tp_analytic(p, 4), "all_reduce"), (4 * 4 + 2) * act + ce + 2 * N * 2 * 4);
}

TEST(ComposedPlans, ExpertParallelStageHoldsItsBlocksLocalExperts) {
  GptConfig c = small_model(4);
  GptOptions o;
  o.ep = EpSpec{2, 1};  // experts 2 and 3
  o.stage = StageSpec{{{2, 4}}, false, true, 1};
  const Gpt<float> m(c, cpu_backend<float>(), o);
  std::vector<std::string> experts;
  for (const auto& e : m.layout().entries())
    if (e.name.find(".moe.expert.") != std::string::npos && e.name.ends_with(".fc.weight")) experts.push_back(e.name);
  EXPECT_EQ(experts, (std::vector<std::string>{"h.2.moe.expert.2.fc.weight", "h.2.moe.expert.3.fc.weight",
                                               "h.3.moe.expert.2.fc.weight", "h.3.moe.expert.3.fc.weight"}));
  EXPECT_EQ(moe_expert_ranges(m.layout(), c).size(), 2u);  // one contiguous range per held block
}
