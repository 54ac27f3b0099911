// A step's schedule as data: the ordered list of actions one rank runs (docs/architecture.md, "The
// parallel step"; where picotron writes each schedule as its own loops). One executor
// (executor.hpp) runs any list; golden tests, timelines and the performance model read the
// same lists. Generators: gradient accumulation (no pipeline: m forwards and backwards in
// turn, then the gradient sync and the optimizer) and the pipeline schedules GPipe, 1F1B and
// interleaved 1F1B, which add the point-to-point actions and model chunks.
//
// Pipeline rules (Megatron-LM's schedules): P stages, m micro-batches, V chunks per rank.
// Chunk c of pipeline rank r is virtual stage c x P + r; activations flow from virtual stage
// k to k + 1 (rank r to r + 1, and from rank P-1 chunk c to rank 0 chunk c + 1), gradients
// back. A forward of a virtual stage > 0 is preceded by the receive of its input
// activations and followed (below the last virtual stage) by the send of its output; a
// backward of a stage below the last is preceded by the receive of its output gradient and
// followed (above stage 0) by the send of its input gradient. Sends are posted
// non-blocking; receives complete before the compute that needs them.
//  - GPipe: all m forwards, then all m backwards (micro-batch order 0..m-1).
//  - 1F1B: warm-up min(P - r - 1, m) forwards, then one forward and one backward in turn,
//    then the remaining backwards (cool-down).
//  - Interleaved 1F1B: micro-batches in groups of G (P <= G <= m; the last group, m % G
//    micro-batches, must be empty or hold at least P); forwards walk the groups, each group
//    through chunks 0..V-1; backwards walk the same table with the chunks reversed; warm-up
//    min(2(P - r - 1) + (V - 1) G, V m) forwards, then 1F1B over the V m virtual
//    micro-batches.
#pragma once

#include "common/modes.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace meshbench::parallel {

enum class ActionKind {
  kForward, kBackward, kGradSync, kOptimizer,
  kRecvActivation,  // before a forward: the input activations from the previous virtual stage
  kSendActivation,  // after a forward: the output activations to the next virtual stage
  kRecvGradient,    // before a backward: the output gradient from the next virtual stage
  kSendGradient,    // after a backward: the input gradient to the previous virtual stage
};

struct Action {
  ActionKind kind;
  int micro = 0;  // micro-batch index (forward, backward, send, recv)
  int chunk = 0;  // model chunk (virtual stage index on this rank); 0 without interleaving
  int peer = -1;  // send/recv: the peer's pipeline rank
};


struct PipeShape {
  int stages = 1;        // P
  int micro_batches = 1; // m
  int chunks = 1;        // V (interleaved)
  int group = 0;         // G: micro-batches per group (interleaved); 0: P
};

// Gradient accumulation over m micro-batches: F0 B0 F1 B1 ... F(m-1) B(m-1) G O.
std::vector<Action> accumulation_schedule(int micro_batches);

// Rank `rank`'s list for a pipeline of shape `s` (P >= 1): compute, send and receive
// actions, then G O. Assumes a valid shape (pipeline_rule_broken() is empty).
std::vector<Action> pipeline_schedule(PipeSchedule kind, const PipeShape& s, int rank);

// The first rule the shape breaks ("" when none): m >= 1, V >= 1, V > 1 only with
// interleaved and P > 1, and interleaved's P <= G <= m and m % G either 0 or >= P.
std::string pipeline_rule_broken(PipeSchedule kind, const PipeShape& s);

// Interleaved: the forward order of (micro-batch, chunk), Megatron's schedule table.
std::vector<std::pair<int, int>> interleaved_table(int micro_batches, int chunks, int group);

// Warm-up forwards of rank `rank` (1F1B and interleaved; GPipe: m x V).
int warmup_forwards(PipeSchedule kind, const PipeShape& s, int rank);

// The most activation bytes a list holds at once: a forward of chunk c takes slot_bytes[c],
// its backward frees them.
int64_t scheduled_activation_peak(const std::vector<Action>& actions, const std::vector<int64_t>& slot_bytes);


// "F0 B0 G O"; chunks > 0 as "F3c1"; sends and receives as "ra0" "sa0" "rg0" "sg0" (with
// "c1"); the peer is not printed.
std::string to_string(const std::vector<Action>& actions);
// Only the forwards and backwards of the list, as to_string writes them.
std::string compute_order(const std::vector<Action>& actions);

}  // namespace meshbench::parallel
