// plan_memory (step/plan_memory.hpp) against values computed by hand from the closed forms in
// docs/zero.md and docs/tensor_parallel.md (their notation) for the default tiny shape (L=2, C=64, NH=KVH=4, hs=16, F=256, T=maxT=64, V=512,
// b=4, tied), so a change in the engine's closed forms or in the adjustments shows here; and
// a 405B shape, which must be arithmetic (nothing allocated).
#include <gtest/gtest.h>

#include "common/plan.hpp"
#include "step/plan_memory.hpp"
#include "pipeline_parallel/plan.hpp"
#include "step/rules.hpp"

using namespace meshbench::parallel;

namespace {
Plan memory_plan_for(const std::string& mesh, int world, int zero = 0, int m = 1, GptConfig model = {}) {
  Plan p;
  p.model = model;
  p.mesh_text = mesh;
  p.mesh = meshbench::comm::parse_mesh(mesh);
  p.zero = zero;
  p.micro_batches = m;
  resolve_and_validate(p, world);
  return p;
}
// Per block: 4C norms + QKV C + QKV + C C + C + F C + F + C F + C = 49984 elements;
// P = V C + maxT C + L 49984 + 2C + V = 137472 elements (no ZeRO padding at d = 2: every
// unit is already a multiple of 32 elements).
constexpr double kP = 137472.0 * 4;
// Activations: N = n = b T = 256 rows; per layer 4nC + 4n + N QKV + N C + 2 N F + b NH T^2
// = 328704 elements; whole model L x that + 2nC + 2n + N V + N = 822016 elements.
constexpr double kActLayer = 328704.0 * 4, kAct = 822016.0 * 4;
// Buffers: (nC + NC + NC + N QKV + b NH T^2 + N F) floats + 2 N int32 token ids.
constexpr double kBuf = 229376.0 * 4 + 2 * 256 * 4;
}  // namespace

TEST(PlanMemory, SingleRankIsTheClosedForm) {
  const PlanMemory m = plan_memory_worst(memory_plan_for("", 1));
  EXPECT_EQ(m.params, kP);
  EXPECT_EQ(m.grads, kP);
  EXPECT_EQ(m.optimizer, 2 * kP);
  EXPECT_EQ(m.activations, kAct);
  EXPECT_EQ(m.buffers, kBuf);
  EXPECT_EQ(m.total(), 4 * kP + kAct + kBuf);
  EXPECT_EQ(plan_memory_per_stage(memory_plan_for("", 1)).size(), 1u);
}

TEST(PlanMemory, ZeroShardsOverDp) {
  const PlanMemory z1 = plan_memory_worst(memory_plan_for("dp=2", 2, 1));
  EXPECT_EQ(z1.params, kP);
  EXPECT_EQ(z1.grads, kP);
  EXPECT_EQ(z1.optimizer, kP);  // 2P / d
  const PlanMemory z2 = plan_memory_worst(memory_plan_for("dp=2", 2, 2));
  EXPECT_EQ(z2.grads, kP / 2);
  EXPECT_EQ(z2.params, kP);
  const PlanMemory z3 = plan_memory_worst(memory_plan_for("dp=2", 2, 3));
  EXPECT_EQ(z3.params, kP / 2);
  EXPECT_EQ(z3.grads, kP / 2);
  EXPECT_EQ(z3.optimizer, kP);
  EXPECT_EQ(z3.activations, kAct);  // ZeRO shards state, not activations
}

TEST(PlanMemory, PipelineStagesAndSchedulePeak) {
  // pp=2, 1F1B, m=2. Stage 0: embeddings (V C + maxT C = 36864) and block 0; stage 1: block 1
  // and the head (norm 2C, bias V, and the tied head's own copy of wte, V C) = 83392.
  const std::vector<PlanMemory> s = plan_memory_per_stage(memory_plan_for("pp=2", 2, 0, 2));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].params, (36864.0 + 49984) * 4);
  EXPECT_EQ(s[1].params, (49984.0 + 128 + 512 + 32768) * 4);
  EXPECT_EQ(s[0].optimizer, 2 * s[0].params);
  // Slots: stage 0 holds one block and its input (n C); 1F1B's rank 0 holds both micro-batches.
  EXPECT_EQ(s[0].activations, 2 * (kActLayer + 256.0 * 64 * 4));
  // Stage 1: one block plus the input, final norm, logits and losses (2nC + 2n + NV + N); one slot.
  EXPECT_EQ(s[1].activations, kActLayer + (2.0 * 256 * 64 + 2 * 256 + 256 * 512 + 256) * 4);
  // Buffers: a second pair of token slots and the received gradient (n C floats); stage 1
  // also a gradient-send buffer.
  EXPECT_EQ(s[0].buffers, kBuf + 2 * 256 * 4 + 256.0 * 64 * 4);
  EXPECT_EQ(s[1].buffers, kBuf + 2 * 256 * 4 + 2 * 256.0 * 64 * 4);
  EXPECT_EQ(plan_memory_worst(memory_plan_for("pp=2", 2, 0, 2)).pp_rank, 0);
  // GPipe holds all m micro-batches on every stage.
  Plan g = memory_plan_for("pp=2", 2, 0, 4);
  g.schedule = PipeSchedule::kGpipe;
  EXPECT_EQ(plan_memory(g, 1).activations, 4 * (kActLayer + (2.0 * 256 * 64 + 2 * 256 + 256 * 512 + 256) * 4));
}

TEST(PlanMemory, A405BShapeIsArithmetic) {
  // Llama 3.1 405B's shape at TP8 x PP16 x DP4 (512 ranks), b = 1, s = 8192, 1F1B, m = 16.
  GptConfig c;
  c.layers = 128;  // 126 in Llama; 128 divides over 16 stages
  c.hidden = 16384;
  c.heads = 128;
  c.kv_heads = 8;
  c.ffn = 53248;
  c.seq = c.max_seq = 8192;
  c.vocab = 128256;
  c.micro_batch = 1;
  c.tied = false;
  const Plan p = memory_plan_for("tp=8,pp=16,dp=4", 512, 0, 16, c);
  const PlanMemory mid = plan_memory(p, 8);
  // A middle stage holds 8 of the 128 blocks, each rank 1/8 of each block's matrices (this
  // engine's MLP is GELU with two matrices, not Llama's three): (QKV C + C C + 2 F C) / 8 per
  // block, QKV = (128 + 2 x 8) x 128, 16 bytes per parameter; norms and biases add < 0.1%.
  const double block = (18432.0 * 16384 + 16384.0 * 16384 + 2 * 53248.0 * 16384) / 8;
  EXPECT_NEAR(mid.params + mid.grads + mid.optimizer, 8 * block * 16, 8 * block * 16 * 1e-3);
  EXPECT_GT(plan_memory_worst(p).total(), mid.total());  // stage 0 holds more in flight
}
