// The plan of a parallel step: the model shape, the mesh degrees and order, and every
// strategy setting, validated once against the model and the world size before any
// communicator exists (DESIGN.md "The parallel step"). A broken rule throws
// core::UsageError naming the options and the rule; step_bench turns it into exit 2 on
// every rank. Not here: communicators (comm/), the strategies that act on the plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/mesh.hpp"
#include "core/routing.hpp"
#include "vocab/config.hpp"
#include "context_parallel/attention.hpp"
#include "pipeline_parallel/schedule.hpp"

namespace meshbench::parallel {

enum class GradReduce { kAvg, kSum };    // --grad-reduce: mean or sum over the dp x cp group
enum class Progress { kPoll, kThread };  // who drives MPI's non-blocking reductions

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
};

// The tensor-parallel rules (heads, kv heads and ffn divisible by tp; seq too with --sp).
void validate_tensor_parallel(const Plan& plan);

// The context-parallel rules (seq divisible by 2 cp for zig-zag, by cp otherwise; Ulysses:
// heads and kv heads per tensor-parallel rank divisible by cp).
void validate_context_parallel(const Plan& plan);

// The expert-parallel rules (ep > 1 needs MoE blocks, E % ep == 0, k <= E; not with tensor
// parallel, expert tensor parallel or ZeRO in this build).
void validate_expert_parallel(const Plan& plan);

// The largest unit of the model (embeddings, a block, or the head) in elements, without
// padding: ZeRO reduces and gathers whole units.
int64_t largest_unit_elements(const GptConfig& c);

// Resolves the degrees for `world` ranks and checks every rule (degrees multiply to the
// world size, --micro-batches >= 1, the dimensions this build runs). Throws UsageError.
void resolve_and_validate(Plan& plan, int world);

// The gradient bucket size in elements: --bucket-mb when given, otherwise the default rule
// (a quarter of the gradient array, at least 64 Ki elements and at most Megatron's 40 M,
// rounded to 64 elements), so a small model still gets about four buckets.
int64_t bucket_elements(const Plan& plan, int64_t grad_elements, int scalar_bytes);

// The pipeline's shape (P, m, V, G) and the global layer ranges [lo, hi) of pipeline rank
// `pp_rank`'s chunks, in chunk order.
PipeShape pipe_shape(const Plan& plan);
std::vector<std::pair<int, int>> stage_chunks(const Plan& plan, int pp_rank);
std::vector<int> layers_per_virtual_stage(const Plan& plan);  // P x V entries

std::string describe(const Plan& plan);  // "dp=2 (order tp-cp-ep-dp-pp), m=2, grad-reduce avg, ..."

}  // namespace meshbench::parallel
