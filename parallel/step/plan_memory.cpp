#include "step/plan_memory.hpp"

#include <algorithm>

#include "expert_parallel/moe.hpp"
#include "model/model.hpp"
#include "pipeline_parallel/plan.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "predict/predict.hpp"
#include "zero/zero.hpp"

namespace meshbench::parallel {

namespace {

constexpr int kScalar = 4;  // fp32 parameters, gradients, moments and activations

GptOptions rank_options(const Plan& plan, int pp_rank) { return plan_rank_options(plan, pp_rank); }

MemoryBytes analytic(const GptConfig& c, const GptOptions& mo) {
  return Gpt<float>::memory_analytic(c, kScalar, mo.tp, mo.cp, mo.ep, mo.flash, mo.recompute_attention,
                                     mo.recompute_blocks);
}

// A stage's blocks: each one's activation bytes kept per micro-batch and, under --recompute
// full, the scratch of the largest recomputed one (a dense block's from the dense model's
// closed form, a MoE block's plus its MoE terms, without the routing ints: the stage keeps
// those per micro-batch, routing_bytes).
struct BlockBytes {
  int64_t dense = 0, moe = 0, output = 0;  // one dense block, a MoE block's extra, a block's output
  int64_t head = 0, input = 0;             // the last chunk's input and head, another chunk's input
};
BlockBytes block_bytes(const Plan& plan, GptOptions mo) {
  mo.recompute_blocks = 0;
  GptConfig none = plan.model, one = plan.model;
  none.experts = one.experts = 0;
  none.layers = 0;
  one.layers = 1;
  const MemoryBytes m0 = analytic(none, mo), m1 = analytic(one, mo);
  BlockBytes b;
  b.dense = m1.activations - m0.activations;
  b.moe = moe_memory(plan.model, kScalar, mo.ep, mo.tp.size, moe_tokens(mo)).block_float_bytes;
  b.head = m0.activations;  // the input, final norm, logits and losses
  b.output = b.input = int64_t{tp_dims(plan.model, mo.tp, mo.cp).rows} * plan.model.hidden * kScalar;
  return b;
}

// The scratch of a stage's largest recomputed block (--recompute full; 0 without).
int64_t recompute_scratch(const Plan& plan, const GptOptions& mo) {
  const BlockBytes bb = block_bytes(plan, mo);
  const std::vector<char> rc = Gpt<float>::recomputed_blocks(plan.model, mo);
  int64_t s = 0;
  for (int l = 0; l < plan.model.layers; ++l)
    if (rc[size_t(l)]) s = std::max(s, bb.dense - bb.output + (plan.model.is_moe(l) ? bb.moe : 0));
  return s;
}

// Bytes of each of the stage's activation slots, in chunk order (pipeline parallel): a
// recomputed block (--recompute full) keeps its output only.
std::vector<int64_t> slot_bytes(const Plan& plan, const GptOptions& mo) {
  const BlockBytes bb = block_bytes(plan, mo);
  const std::vector<char> rc = Gpt<float>::recomputed_blocks(plan.model, mo);
  std::vector<int64_t> bytes;
  const auto& chunks = mo.stage->chunks;
  for (size_t k = 0; k < chunks.size(); ++k) {
    const bool ends_model = mo.stage->last && k + 1 == chunks.size();
    int64_t b = ends_model ? bb.head : bb.input;
    for (int l = chunks[k].first; l < chunks[k].second; ++l)
      b += rc[size_t(l)] ? bb.output : bb.dense + (plan.model.is_moe(l) ? bb.moe : 0);
    bytes.push_back(b);
  }
  return bytes;
}

// The stage's MoE routing state: one copy per micro-batch of the step for each of its MoE blocks.
int64_t routing_bytes(const Plan& plan, const GptOptions& mo) {
  int64_t blocks = 0;
  for (const auto& [lo, hi] : mo.stage->chunks)
    for (int l = lo; l < hi; ++l) blocks += plan.model.is_moe(l) ? 1 : 0;
  return blocks * plan.micro_batches * moe_routing_ints(moe_local_config(plan.model, moe_tokens(mo)), mo.ep) * 4;
}

}  // namespace

PlanMemory plan_memory(const Plan& plan, int pp_rank) {
  const GptOptions mo = rank_options(plan, pp_rank);
  const bool pipeline = plan.degrees.pp > 1;
  // a pipeline stage's activations and recomputed-block scratch come from its own blocks below
  GptOptions whole = mo;
  if (pipeline) whole.recompute_blocks = 0;
  const MemoryBytes ma = analytic(plan.model, whole);
  PlanMemory m;
  m.pp_rank = pp_rank;
  m.params = double(ma.params);
  m.grads = double(ma.grads);
  m.optimizer = double(ma.optimizer);
  m.activations = double(ma.activations);
  m.buffers = double(ma.buffers);
  if (plan.zero > 0 || pipeline) {
    const int64_t flat = Gpt<float>::flat_elements(plan.model, mo);
    const StateBytes z = zero_state_bytes(flat, Gpt<float>::expert_segment_elements(plan.model, mo), kScalar,
                                          plan.zero, plan.degrees.dp * plan.degrees.cp, plan.degrees.edp);
    m.params = z.params;
    // ZeRO-3 keeping its gathered units (--zero3-keep-params; the default under a pipeline):
    // from the last unit's gather to the step's last backward the whole stage is held as well.
    if (plan.zero == 3 && plan.keep_params) m.params += double(flat) * kScalar;
    m.grads = z.grads;
    m.optimizer = z.optimizer;
  }
  if (pipeline) {
    const std::vector<Action> actions = pipeline_schedule(plan.schedule, pipe_shape(plan), pp_rank);
    m.activations = double(scheduled_activation_peak(actions, slot_bytes(plan, mo)) + routing_bytes(plan, mo));
    const double N = double(tp_dims(plan.model, mo.tp, mo.cp).tokens);
    const double message = double(tp_dims(plan.model, mo.tp, mo.cp).rows) * plan.model.hidden * kScalar;
    // the received output gradient, and a gradient-send buffer except on virtual stage 0 alone
    const int messages = pp_rank == 0 && plan.vpp == 1 ? 1 : 2;
    m.buffers += 2 * N * 4 * (plan.micro_batches - 1) + messages * message + double(recompute_scratch(plan, mo));
  }
  return m;
}

PlanMemory gpu_plan_memory(const Plan& plan, int pp_rank) {
  const GptConfig& c = plan.model;
  const GptOptions mo = rank_options(plan, pp_rank);
  const comm::Degrees& dg = plan.degrees;
  const double t = std::max(1, dg.tp), d = double(dg.dp) * dg.cp;
  const double P = double(Gpt<float>::flat_elements(c, mo));  // the stage's slice (tensor-parallel, its layers)
  PlanMemory m;
  m.pp_rank = pp_rank;
  m.params = 2 * P / (plan.zero >= 3 ? d : 1);
  m.grads = 4 * P / (plan.zero >= 2 ? d : 1);
  m.optimizer = 12 * P / (plan.zero >= 1 ? d : 1);
  const double sbh = double(c.seq) / std::max(1, dg.cp) * c.micro_batch * c.hidden;
  // a block kept whole, and one --recompute full recomputes (its input, bf16); the block being
  // recomputed holds a whole block's activations for the time of its backward (buffers)
  const double layer = plan.sp ? 34 * sbh / t : sbh * (10 + 24 / t), kept = 2 * sbh / (plan.sp ? t : 1.0);
  const int R = mo.recompute_blocks;
  const double logits = 4.0 * double(c.seq) / std::max(1, dg.cp) * c.micro_batch * c.vocab / t;
  if (R > 0) m.buffers = layer;
  auto chunk_bytes = [&](int layers) { return std::min(layers, R) * kept + std::max(0, layers - R) * layer; };
  if (dg.pp <= 1) {
    m.activations = chunk_bytes(c.layers) + logits;
    return m;
  }
  std::vector<int64_t> slots;
  const auto& chunks = mo.stage->chunks;
  for (size_t k = 0; k < chunks.size(); ++k) {
    const bool ends_model = mo.stage->last && k + 1 == chunks.size();
    slots.push_back(int64_t(chunk_bytes(chunks[k].second - chunks[k].first) + (ends_model ? logits : 0.0)));
  }
  const std::vector<Action> actions = pipeline_schedule(plan.schedule, pipe_shape(plan), pp_rank);
  m.activations = double(scheduled_activation_peak(actions, slots));
  // the received activation and output gradient of one micro-batch (bf16)
  m.buffers += 2 * 2 * sbh / (plan.sp ? t : 1.0);
  return m;
}

std::vector<PlanMemory> gpu_plan_memory_per_stage(const Plan& plan) {
  std::vector<PlanMemory> v;
  for (int r = 0; r < std::max(1, plan.degrees.pp); ++r) v.push_back(gpu_plan_memory(plan, r));
  return v;
}

std::vector<PlanMemory> plan_memory_per_stage(const Plan& plan) {
  std::vector<PlanMemory> v;
  for (int r = 0; r < std::max(1, plan.degrees.pp); ++r) v.push_back(plan_memory(plan, r));
  return v;
}

PlanMemory plan_memory_worst(const Plan& plan) {
  const std::vector<PlanMemory> v = plan_memory_per_stage(plan);
  return *std::max_element(v.begin(), v.end(),
                           [](const PlanMemory& a, const PlanMemory& b) { return a.total() < b.total(); });
}

}  // namespace meshbench::parallel
