// The analytic memory of one rank of a plan, per category, in closed form: what
// `step_bench --plan-only` prints and what `scripts/sweep` prunes plans by. Nothing is
// allocated (a 405B shape is arithmetic): the engine's own closed forms do the work,
// Gpt<float>::memory_analytic (activations, buffers, the whole model's parameters),
// Gpt<float>::flat_elements (the parameter table of a pipeline stage or a ZeRO-padded model)
// and the pipeline schedule's activation-slot peak, with the ZeRO and pipeline adjustments
// step_bench's memory table applies to its analytic column.
// Not here: measured memory (step_bench's memory rows), the validation rules (plan.hpp).
#pragma once

#include <string>
#include <vector>

#include "common/plan.hpp"

namespace meshbench::parallel {

// Bytes per category on one rank (fp32 parameters, gradients and AdamW moments).
struct PlanMemory {
  int pp_rank = 0;  // the pipeline stage this is for (0 without pipeline parallel)
  double params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;
  double total() const { return params + grads + optimizer + activations + buffers; }
};

// Pipeline stage `pp_rank`'s memory under `plan` (a validated plan: resolve_and_validate).
//   params, grads, optimizer: memory_analytic's whole-model values (16 bytes per parameter of
//     the tensor-parallel slice and the rank's experts); ZeRO over d = dp x cp ranks:
//     P = the ZeRO-padded flat array, params P (stage 3: P/d), grads P (stages 2, 3: P/d),
//     optimizer 2P/d; pipeline: P = the stage's flat array (its blocks, the embeddings on the
//     first stage, the head on the last, a tied head's copy of wte there), 4 + 4 + 8 bytes.
//   activations: memory_analytic's one slot without pipeline parallel; with it, the largest
//     sum of slot sizes the stage's schedule holds at once (scheduled_activation_peak), a
//     chunk's slot being its layers' activations (a dense or a MoE block's, each by its type)
//     and its input (the last stage's last chunk: the final norm, logits and losses instead),
//     plus the MoE routing state the stage keeps per micro-batch for each of its MoE blocks.
//   buffers: memory_analytic's backward buffers; with pipeline parallel also the m token and
//     target slots and the messages of b x s/cp x h floats: the received output gradient and
//     (but on the first stage without interleaving) at least one gradient-send buffer.
// Tensor-parallel vocabulary padding and the layout's 16-element alignment of activations
// are not counted (parameters are: the flat arrays' totals include them).
PlanMemory plan_memory(const Plan& plan, int pp_rank);

// Every stage's memory (one entry without pipeline parallel) and the one with the largest total.
std::vector<PlanMemory> plan_memory_per_stage(const Plan& plan);

// The same stage on a GPU that trains in mixed precision with flash attention (the step
// model's feasibility on a cluster, docs/predict.md "Memory on a GPU"): per parameter of the
// stage's slice, bf16 weights (2 B), fp32 gradients (4 B) and fp32 master weights and AdamW
// moments (12 B), ZeRO over d = dp x cp sharding the moments and master (stage 1), the
// gradients (2) and the weights (3); activations per layer and micro-batch from Korthikanti et
// al. 2022 (arXiv:2205.05198) Section 4 without the attention matrix (flash keeps none):
// s b h (10 + 24/t) bytes, s b h 34/t with sequence parallelism, 2 s b h (/t with SP) under
// full recomputation (the block's input only; --recompute-layers K: the first K blocks of each
// chunk, the rest whole), s the local sequence (/cp); under full recomputation the block being
// recomputed holds one whole block's activations (buffers). The last stage adds its fp32
// logits (4 s b V/t), and the schedule's activation-slot peak counts the micro-batches in
// flight. The engine's own layout (plan_memory) is fp32 and holds the attention matrix
// unless --attention flash.
PlanMemory gpu_plan_memory(const Plan& plan, int pp_rank);
std::vector<PlanMemory> gpu_plan_memory_per_stage(const Plan& plan);
PlanMemory plan_memory_worst(const Plan& plan);

}  // namespace meshbench::parallel
