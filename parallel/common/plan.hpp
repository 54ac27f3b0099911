// The plan of a parallel step: the model shape, the mesh degrees and order, and every
// strategy setting, validated once against the model and the world size before any
// communicator exists (docs/architecture.md "The parallel step"). A broken rule throws
// core::UsageError naming the options and the rule; step_bench turns it into exit 2 on
// every rank. The vocabulary every strategy folder shares; each strategy keeps its own rules
// (its validate_*), listed in step/rules.hpp.
// Not here: communicators (comm/), the strategies that act on the plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/mesh.hpp"
#include "core/routing.hpp"
#include "common/config.hpp"
#include "common/modes.hpp"

namespace meshbench::parallel {


struct Plan {
  GptConfig model;           // model.micro_batch is b, the micro-batch of one rank
  std::string mesh_text;     // --mesh as typed
  comm::MeshSpec mesh;       // parsed
  std::string order = std::string(comm::kDefaultOrder);
  comm::Degrees degrees;     // resolved against the world size
  int world = 1;
  int micro_batches = 1;     // m: gradients accumulate over m micro-batches per step
  GradReduce grad_reduce = GradReduce::kAvg;
  bool overlap = true;       // start each bucket's reduction as soon as its gradients are final
  double bucket_mb = 0;      // bucket size in MiB of gradients; 0: the default rule
  Progress progress = Progress::kPoll;
  int zero = 0;              // ZeRO stage 0 (plain data parallel) .. 3
  int prefetch = 1;          // ZeRO-3: units gathered ahead of the one in use
  bool keep_params = false;  // ZeRO-3: keep gathered units across micro-batches
  // Activation recomputation (--recompute; Megatron's definitions): none, selective (the
  // attention core again before its backward) or full (each block's forward again before its
  // backward; --recompute-layers K: only the first K blocks of each model chunk, 0: all).
  std::string recompute = "none";
  int recompute_layers = 0;
  // --compute modelled: every compute action waits its modelled duration and no model state
  // exists, so the rules about what the engine's state can do (recomputation under cp) do not apply.
  bool modelled_compute = false;
  // The engine's model exists on every rank: false for a prediction (--plan-only --predict) and
  // a modelled run, which allocate none of its tensors (so the 32-bit size rule does not apply).
  bool allocates = true;
  // The blocks of each model chunk that --recompute full recomputes (GptOptions::recompute_blocks).
  int recompute_blocks() const { return recompute != "full" ? 0 : recompute_layers > 0 ? recompute_layers : 1 << 30; }
  // --attention flash: causal attention without the T x T matrix (kernels/layers.hpp
  // flash_attention_*); naive stores the probabilities. step_bench's default is flash
  // (Options::attention); a Plan built in code is naive unless it says so.
  bool flash = false;
  std::string attention_rule;  // why flash or naive (kernels/attention_choice.hpp); empty: a Plan built in code
  bool sp = false;           // tensor parallel: sequence parallel (--sp)
  bool sp_regather = true;   // SP: re-gather column-parallel inputs in the backward
  CpAlgo cp_algo = CpAlgo::kRing;  // context parallel: --cp-algo
  bool cp_zigzag = true;     // --cp-split zigzag (else contiguous)
  core::Routing routing;     // MoE: --routing (learned: the router decides)
  // Pipeline parallel (--mesh pp=P): the schedule, V model chunks per rank (interleaved), the
  // interleaved micro-batch group G (0: P), and the layers of each virtual stage (P x V
  // entries, virtual stage c x P + r is chunk c of pipeline rank r; empty: an even split).
  PipeSchedule schedule = PipeSchedule::k1F1B;
  int vpp = 1;
  int vpp_group = 0;
  std::vector<int> layers_per_stage;

  int64_t global_batch() const {  // sequences per step: b x m x dp
    return int64_t{model.micro_batch} * micro_batches * degrees.dp;
  }
  int64_t global_tokens() const { return global_batch() * model.seq; }
  // MoE blocks whose experts are placed on the expert grid (ep > 1 or etp > 1): their
  // gradients reduce over edp, and ZeRO shards them over it.
  bool experts_placed() const { return model.moe_blocks() > 0 && (degrees.ep > 1 || degrees.etp > 1); }
  // How many times a step sums the replicated parameters' gradients over tp (sequence
  // parallel's norms, the MoE router): once after the last micro-batch, or after every one
  // when the gradients leave the model each micro-batch (ZeRO-3's reduce-scatter).
  int replicated_grad_syncs() const { return zero == 3 ? micro_batches : 1; }
};

// A strategy's rules for a plan (its folder's validate_*): throws core::UsageError naming the
// options and the rule. step/rules.hpp lists every strategy's, in the order they are checked.
using PlanRule = void (*)(const Plan&);

// Resolves the degrees for `world` ranks (they must multiply to the world size; --micro-batches
// >= 1; the dimensions this build runs), then checks `rules` in order. Throws UsageError.
void resolve_plan(Plan& plan, int world, const std::vector<PlanRule>& rules);

std::string describe(const Plan& plan);  // "dp=2 (order tp-cp-ep-dp-pp), m=2, grad-reduce avg, ..."

}  // namespace meshbench::parallel
